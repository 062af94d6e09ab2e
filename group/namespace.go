package group

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// Namespaces are replicated through Paxos group 0, so every node agrees on
// them: a record per namespace in group 0's keyspace ('n' + name) holding a
// salt and SHA-256(salt || secret). Secrets themselves are never stored or
// logged; a Hello's secret is hashed and compared in constant time.

const (
	nsPrefix  = 'n'
	nsSaltLen = 16
	nsRecLen  = 1 + nsSaltLen + sha256.Size
	nsRecV1   = 1
)

// NamespaceGroup is the lock group that holds the namespace table (its
// Paxos group id is NamespaceGroup+1, like every lock group's: Paxos
// group ids start at 1). Its master seeds and changes namespaces.
const NamespaceGroup = 0

// ErrNotSystemMaster means this node does not master group 0, where
// namespace changes are proposed; MasterNode names the node that does.
var ErrNotSystemMaster = errors.New("group: not the master of the namespace table")

// ErrUnknownNamespace means the namespace does not exist.
var ErrUnknownNamespace = errors.New("group: unknown namespace")

type nsRec [nsRecLen]byte

func hashSecret(salt []byte, secret string) [sha256.Size]byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(secret))
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

func newNSRec(secret string) (nsRec, error) {
	var r nsRec
	r[0] = nsRecV1
	if _, err := rand.Read(r[1 : 1+nsSaltLen]); err != nil {
		return r, fmt.Errorf("group: namespace salt: %w", err)
	}
	sum := hashSecret(r[1:1+nsSaltLen], secret)
	copy(r[1+nsSaltLen:], sum[:])
	return r, nil
}

func (r *nsRec) check(secret string) bool {
	sum := hashSecret(r[1:1+nsSaltLen], secret)
	return subtle.ConstantTimeCompare(sum[:], r[1+nsSaltLen:]) == 1
}

var nsInitKey = []byte("mnsinit")

// applyNamespace applies opNamespacePut, opNamespaceDelete and
// opNamespaceInit. Any of them marks the table initialised; Init installs
// the configured namespaces only into a table never initialised, so a
// namespace an operator removed does not come back from a config file.
func (sm *StateMachine) applyNamespace(c *command, w paxos.Writer) *outcome {
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
			return &outcome{status: wire.StatusSuccess}
		}
		recs, err := decodeNSList(c.data)
		if err != nil {
			return &outcome{status: wire.StatusBadRequest}
		}
		sm.nsMu.Lock()
		for name, r := range recs {
			sm.namespaces[name] = r
			w.Set(append([]byte{nsPrefix}, name...), r[:])
		}
		sm.nsMu.Unlock()
	case opNamespacePut:
		if len(c.data) != nsRecLen || c.data[0] != nsRecV1 || wire.ValidateNamespace(c.key) != nil {
			return &outcome{status: wire.StatusBadRequest}
		}
		var r nsRec
		copy(r[:], c.data)
		sm.nsMu.Lock()
		sm.namespaces[c.key] = r
		sm.nsMu.Unlock()
		w.Set(key, r[:])
	case opNamespaceDelete:
		sm.nsMu.Lock()
		_, ok := sm.namespaces[c.key]
		delete(sm.namespaces, c.key)
		sm.nsMu.Unlock()
		if !ok {
			return &outcome{status: wire.StatusLockDeleted}
		}
		w.Delete(key)
	}
	return &outcome{status: wire.StatusSuccess}
}

func (sm *StateMachine) loadNamespace(k, v []byte) error {
	if len(v) != nsRecLen || v[0] != nsRecV1 {
		return fmt.Errorf("group: namespace %q: %w", k[1:], errBadCommand)
	}
	var r nsRec
	copy(r[:], v)
	sm.namespaces[string(k[1:])] = r
	return nil
}

// Authenticate reports whether secret is namespace ns's secret, as this
// replica of the namespace table knows it. Until the table has been
// initialised (a fresh cluster whose group 0 has not yet installed the
// configured namespaces), seed holds the configured ones.
func (s *Service) Authenticate(ns, secret string, seed map[string]string) bool {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	r, ok := sm.namespaces[ns]
	init := sm.nsInit
	sm.nsMu.RUnlock()
	if !init {
		want, ok := seed[ns]
		return ok && subtle.ConstantTimeCompare([]byte(want), []byte(secret)) == 1
	}
	if !ok {
		var zero nsRec
		zero.check(secret) // same work either way
		return false
	}
	return r.check(secret)
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
	return s.proposeNamespace(ctx, &command{op: opNamespacePut, key: ns, data: rec[:]})
}

// DeleteNamespace removes namespace ns: its clients can no longer
// authenticate; locks they hold expire unless renewed on open connections.
func (s *Service) DeleteNamespace(ctx context.Context, ns string) error {
	return s.proposeNamespace(ctx, &command{op: opNamespaceDelete, key: ns})
}

func (s *Service) proposeNamespace(ctx context.Context, c *command) error {
	px := s.groups[NamespaceGroup].px
	if !px.Status().Serving {
		return ErrNotSystemMaster
	}
	res, err := propose(ctx, px, appendCommand(nil, c))
	if err != nil {
		if errors.Is(err, paxos.ErrNotMaster) {
			return ErrNotSystemMaster
		}
		return fmt.Errorf("group: namespace change: %w", err)
	}
	out, _ := res.Value.(*outcome)
	switch {
	case out == nil:
		return fmt.Errorf("group: namespace change: no outcome")
	case out.status == wire.StatusLockDeleted:
		return ErrUnknownNamespace
	case out.status != wire.StatusSuccess:
		return fmt.Errorf("group: namespace change: %s", out.status)
	}
	return nil
}

// NamespacesInitialised reports whether the namespace table was ever
// written.
func (s *Service) NamespacesInitialised() bool {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	defer sm.nsMu.RUnlock()
	return sm.nsInit
}

// InitNamespaces installs the configured namespaces if the table was never
// written (a no-op otherwise). It must run on the master of group 0.
func (s *Service) InitNamespaces(ctx context.Context, seed map[string]string) error {
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
		r, err := newNSRec(seed[name])
		if err != nil {
			return err
		}
		data = binary.AppendUvarint(data, uint64(len(name)))
		data = append(data, name...)
		data = append(data, r[:]...)
	}
	return s.proposeNamespace(ctx, &command{op: opNamespaceInit, data: data})
}

func decodeNSList(b []byte) (map[string]nsRec, error) {
	out := map[string]nsRec{}
	r := reader{b: b}
	for len(r.b) > 0 && !r.err {
		name := string(r.bytes(r.uvarint()))
		rec := r.bytes(nsRecLen)
		if r.err || len(rec) != nsRecLen || rec[0] != nsRecV1 || wire.ValidateNamespace(name) != nil {
			return nil, errBadCommand
		}
		var x nsRec
		copy(x[:], rec)
		out[name] = x
	}
	if r.err {
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
