package group

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/paxlock/paxlock/internal/scramauth"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// Namespaces are replicated through lock group 0 (NamespaceGroup), so
// every node agrees on them: a record per namespace in group 0's keyspace
// ('n' + name). Secrets
// themselves are never stored or logged.
//
// A record of version 2 (written since SCRAM) holds the namespace's SCRAM
// verifier (scramauth.Verifier: iteration count, salt, StoredKey,
// ServerKey), derived from the secret on the node that proposes the
// change. A record of version 1 (written before) holds a salt and
// SHA-256(salt || secret), from which no SCRAM verifier can be derived:
// it still loads (from the log and from snapshots; nothing is lost), and a
// namespace whose secret is also in the node's configuration gets its
// verifier derived from that secret, with the record's salt, on every
// node alike (see Credentials). Another version-1 namespace cannot
// authenticate until its secret is set again (POST /namespaces).

const (
	nsPrefix   = 'n'
	nsSaltLen  = 16
	nsRecV1Len = 1 + nsSaltLen + sha256.Size
	nsRecV1    = 1
	nsRecV2    = 2
	// v2: version, iterations (u32), salt length (u8), salt, StoredKey,
	// ServerKey.
	nsRecV2Fixed = 1 + 4 + 1 + 2*scramauth.KeyLen
)

// NamespaceGroup is the lock group that holds the namespace table
// (replicated by ReplicationID(NamespaceGroup), like every lock group).
// Its master seeds and changes namespaces.
const NamespaceGroup = 0

// ErrNotSystemMaster means this node does not master group 0, where
// namespace changes are proposed; MasterNode names the node that does.
var ErrNotSystemMaster = errors.New("group: not the master of the namespace table")

// ErrUnknownNamespace means the namespace does not exist.
var ErrUnknownNamespace = errors.New("group: unknown namespace")

// nsRec is one namespace's record, as replicated.
type nsRec struct {
	raw []byte             // the record as stored
	v   scramauth.Verifier // version 2's verifier; for version 1, derived from the configured secret once (see Credentials)
	ok  bool               // v is set
}

func hashSecret(salt []byte, secret string) [sha256.Size]byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(secret))
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// newNSRec derives the version-2 record of secret, with a fresh salt.
func newNSRec(secret string) ([]byte, error) {
	v, err := scramauth.NewVerifier(secret)
	if err != nil {
		return nil, fmt.Errorf("group: namespace verifier: %w", err)
	}
	return encodeNSRec(v), nil
}

func encodeNSRec(v scramauth.Verifier) []byte {
	b := make([]byte, 0, nsRecV2Fixed+len(v.Salt))
	b = append(b, nsRecV2)
	b = binary.BigEndian.AppendUint32(b, uint32(v.Iters))
	b = append(b, byte(len(v.Salt)))
	b = append(b, v.Salt...)
	b = append(b, v.StoredKey...)
	return append(b, v.ServerKey...)
}

// parseNSRec checks a record of either version.
func parseNSRec(b []byte) (nsRec, error) {
	r := nsRec{raw: append([]byte(nil), b...)}
	switch {
	case len(b) == nsRecV1Len && b[0] == nsRecV1:
		return r, nil
	case len(b) >= nsRecV2Fixed && b[0] == nsRecV2 && len(b) == nsRecV2Fixed+int(b[5]):
		n := int(b[5])
		v := scramauth.Verifier{
			Iters:     int(binary.BigEndian.Uint32(b[1:5])),
			Salt:      r.raw[6 : 6+n],
			StoredKey: r.raw[6+n : 6+n+scramauth.KeyLen],
			ServerKey: r.raw[6+n+scramauth.KeyLen:],
		}
		if v.Validate() != nil {
			return nsRec{}, errBadCommand
		}
		r.v, r.ok = v, true
		return r, nil
	}
	return nsRec{}, errBadCommand
}

// legacyVerifier derives the verifier of a version-1 record from secret,
// if secret is the record's: with the record's salt and Iterations, so
// that every node derives the same one.
func (r *nsRec) legacyVerifier(secret string) (scramauth.Verifier, bool) {
	if len(r.raw) != nsRecV1Len || r.raw[0] != nsRecV1 {
		return scramauth.Verifier{}, false
	}
	salt := r.raw[1 : 1+nsSaltLen]
	sum := hashSecret(salt, secret)
	if subtle.ConstantTimeCompare(sum[:], r.raw[1+nsSaltLen:]) != 1 {
		return scramauth.Verifier{}, false
	}
	v, err := scramauth.Derive(secret, salt, scramauth.Iterations)
	return v, err == nil
}

var nsInitKey = []byte("mnsinit")

// nsOutcome is the outcome of a namespace-table change as every replica
// of group 0 computes it: the applied command's result itself, which
// proposeNamespace turns into an error.
type nsOutcome uint8

// Namespace-table change outcomes.
const (
	// nsApplied: the change was applied, or was a no-op (the table
	// initialised already).
	nsApplied nsOutcome = iota + 1
	// nsBadRecord: the command's name or record is malformed.
	nsBadRecord
	// nsUnknown: the namespace to delete is not in the table
	// (ErrUnknownNamespace).
	nsUnknown
)

// applyNamespace applies opNamespacePut, opNamespaceDelete and
// opNamespaceInit. Any of them marks the table initialised; Init installs
// the configured namespaces only into a table never initialised, so a
// namespace an operator removed does not come back from a config file.
func (sm *StateMachine) applyNamespace(c *command, w paxos.Writer) nsOutcome {
	key := append([]byte{nsPrefix}, c.key...)
	sm.nsMu.Lock()
	wasInit := sm.nsInit
	sm.nsInit = true
	sm.nsGen++
	sm.nsMu.Unlock()
	if !wasInit {
		w.Set(nsInitKey, []byte{1})
	}
	switch c.op {
	case opNamespaceInit:
		if wasInit {
			return nsApplied
		}
		recs, err := decodeNSList(c.data)
		if err != nil {
			return nsBadRecord
		}
		sm.nsMu.Lock()
		for name, r := range recs {
			sm.namespaces[name] = r
			w.Set(append([]byte{nsPrefix}, name...), r.raw)
		}
		sm.nsMu.Unlock()
	case opNamespacePut:
		r, err := parseNSRec(c.data)
		if err != nil || wire.ValidateNamespace(c.key) != nil {
			return nsBadRecord
		}
		sm.nsMu.Lock()
		sm.namespaces[c.key] = r
		sm.nsMu.Unlock()
		w.Set(key, r.raw)
	case opNamespaceDelete:
		sm.nsMu.Lock()
		_, ok := sm.namespaces[c.key]
		delete(sm.namespaces, c.key)
		hadQuota := sm.quotas.Drop(c.key, w)
		sm.nsMu.Unlock()
		if hadQuota {
			sm.quotasChanged()
		}
		if !ok {
			return nsUnknown
		}
		w.Delete(key)
	}
	return nsApplied
}

func (sm *StateMachine) loadNamespace(k, v []byte) error {
	r, err := parseNSRec(v)
	if err != nil {
		return fmt.Errorf("group: namespace %q: %w", k[1:], err)
	}
	sm.namespaces[string(k[1:])] = r
	return nil
}

// SeedVerifier derives the verifier of a configured namespace: with a
// salt derived from the cluster and namespace names, so that every node
// derives the same one (InitNamespaces installs it; sessions
// authenticated before then stay valid after). A namespace created or
// changed at run time gets a random salt.
func SeedVerifier(cluster, ns, secret string) (scramauth.Verifier, error) {
	h := sha256.New()
	h.Write([]byte("paxlock namespace seed salt\x00"))
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write([]byte(ns))
	return scramauth.Derive(secret, h.Sum(nil)[:nsSaltLen], scramauth.Iterations)
}

// Credentials returns namespace ns's SCRAM verifier as this replica of
// the namespace table knows it, false if the namespace does not exist or
// cannot authenticate (a version-1 record whose secret the node's
// configuration does not hold). Until the table has been initialised (a
// fresh cluster whose group 0 has not yet installed the configured
// namespaces), seed holds the configured ones' verifiers; seedSecrets are
// the configured secrets, which give a version-1 record its verifier.
func (s *Service) Credentials(ns string, seed map[string]scramauth.Verifier, seedSecrets map[string]string) (scramauth.Verifier, bool) {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	r, ok := sm.namespaces[ns]
	init := sm.nsInit
	sm.nsMu.RUnlock()
	if !init {
		v, ok := seed[ns]
		return v, ok
	}
	if !ok {
		return scramauth.Verifier{}, false
	}
	if r.ok {
		return r.v, true
	}
	secret, ok := seedSecrets[ns]
	if !ok {
		return scramauth.Verifier{}, false
	}
	v, ok := r.legacyVerifier(secret)
	if !ok {
		return scramauth.Verifier{}, false
	}
	// Keep it, unless the record changed meanwhile.
	sm.nsMu.Lock()
	if cur, still := sm.namespaces[ns]; still && bytes.Equal(cur.raw, r.raw) {
		cur.v, cur.ok = v, true
		sm.namespaces[ns] = cur
	}
	sm.nsMu.Unlock()
	return v, true
}

// NamespaceGeneration counts the changes this replica has applied to the
// namespace table (a namespace put, deleted or installed, a snapshot
// loaded). A session authenticated at one generation must be checked
// again once the generation moves: its namespace may be gone or its
// secret changed.
func (s *Service) NamespaceGeneration() uint64 {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	defer sm.nsMu.RUnlock()
	return sm.nsGen
}

// Namespaces lists the namespaces, sorted.
func (s *Service) Namespaces() []string {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	out := make([]string, 0, len(sm.namespaces))
	for n := range sm.namespaces {
		out = append(out, n)
	}
	sm.nsMu.RUnlock()
	sort.Strings(out)
	return out
}

// HasNamespace reports whether ns exists.
func (s *Service) HasNamespace(ns string) bool {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	defer sm.nsMu.RUnlock()
	_, ok := sm.namespaces[ns]
	return ok
}

// SystemMaster returns the node mastering the namespace table, 0 if none
// is known.
func (s *Service) SystemMaster() paxos.NodeID {
	return s.groups[NamespaceGroup].px.Status().Master
}

// PutNamespace creates namespace ns or changes its secret. It must run on
// the master of group 0 (else ErrNotSystemMaster).
func (s *Service) PutNamespace(ctx context.Context, ns, secret string) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	rec, err := newNSRec(secret)
	if err != nil {
		return err
	}
	return s.proposeNamespace(ctx, &command{op: opNamespacePut, key: ns, data: rec})
}

// PutNamespaceVerifier creates namespace ns or changes its verifier to
// v, derived from the secret elsewhere (a registry installs the meta
// cluster's so). It must run on the master of group 0.
func (s *Service) PutNamespaceVerifier(ctx context.Context, ns string, v scramauth.Verifier) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", wire.ErrInvalid, ns, err)
	}
	return s.proposeNamespace(ctx, &command{op: opNamespacePut, key: ns, data: encodeNSRec(v)})
}

// DeleteNamespace removes namespace ns: its clients can no longer
// authenticate; locks they hold expire unless renewed on open connections.
func (s *Service) DeleteNamespace(ctx context.Context, ns string) error {
	return s.proposeNamespace(ctx, &command{op: opNamespaceDelete, key: ns})
}

func (s *Service) proposeNamespace(ctx context.Context, c *command) error {
	res, err := s.proposeTable(ctx, c, "namespace change")
	if err != nil {
		return err
	}
	switch o, _ := res.(nsOutcome); o {
	case nsApplied:
		return nil
	case nsUnknown:
		return ErrUnknownNamespace
	}
	return fmt.Errorf("group: namespace change: %v", res)
}

// NamespacesInitialised reports whether the namespace table was ever
// written.
func (s *Service) NamespacesInitialised() bool {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	defer sm.nsMu.RUnlock()
	return sm.nsInit
}

// InitNamespaces installs the configured namespaces, with their
// verifiers, if the table was never written (a no-op otherwise). It must
// run on the master of group 0.
func (s *Service) InitNamespaces(ctx context.Context, seed map[string]scramauth.Verifier) error {
	names := make([]string, 0, len(seed))
	for name := range seed {
		if err := wire.ValidateNamespace(name); err != nil {
			return err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var data []byte
	for _, name := range names {
		v := seed[name]
		if err := v.Validate(); err != nil {
			return fmt.Errorf("group: namespace %q: %w", name, err)
		}
		r := encodeNSRec(v)
		data = binary.AppendUvarint(data, uint64(len(name)))
		data = append(data, name...)
		data = binary.AppendUvarint(data, uint64(len(r)))
		data = append(data, r...)
	}
	return s.proposeNamespace(ctx, &command{op: opNamespaceInit, data: data})
}

// decodeNSList decodes opNamespaceInit's data: name, record, name,
// record... Each record is length-prefixed (uvarint) since version 2;
// commands written before hold version-1 records of fixed length without
// a prefix, told apart by the byte that follows the name (a version-1
// record starts with 1, a prefix of a version-2 record is over 1).
func decodeNSList(b []byte) (map[string]nsRec, error) {
	out := map[string]nsRec{}
	r := newReader(b)
	for r.Len() > 0 && !r.Failed() {
		name := string(r.Bytes(r.Uvarint()))
		if r.Failed() || r.Len() == 0 || wire.ValidateNamespace(name) != nil {
			return nil, errBadCommand
		}
		var raw []byte
		if r.Rest()[0] == nsRecV1 {
			raw = r.Bytes(nsRecV1Len)
		} else {
			raw = r.Bytes(r.Uvarint())
		}
		if r.Failed() {
			return nil, errBadCommand
		}
		rec, err := parseNSRec(raw)
		if err != nil {
			return nil, err
		}
		out[name] = rec
	}
	if r.Failed() {
		return nil, errBadCommand
	}
	return out, nil
}

// propose submits cmd to px and waits until it is applied or failed, or
// ctx ends. When ctx ends first the outcome is unknown: the command may
// still be chosen.
func propose(ctx context.Context, px Consensus, cmd []byte) (paxos.Result, error) {
	ch := make(chan paxos.Result, 1)
	px.Submit(cmd, func(r paxos.Result) { ch <- r })
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return paxos.Result{}, fmt.Errorf("propose: %w", ctx.Err())
	}
}
