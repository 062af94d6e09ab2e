package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/scramauth"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
	"github.com/paxlock/paxlock/wire"
)

// The registry's tables are replicated through lock group 0 of the meta
// cluster (any cluster whose group 0 holds them), next to the namespace
// table and the member list: the lock clusters the registry serves, each
// namespace's assignment to one of them with its SCRAM verifier, and the
// namespace moves in progress. Each table is a set of records in group
// 0's keyspace under prefix 'r', written through on apply like namespace
// records, and the tables share one version ('r' 'v') that every applied
// change raises, so that a registry process that follows them can tell a
// newer copy from an older one and resume from the version it has.
//
//	'r' 'c' name -> cluster:    1, clients, admins (each a list), CA
//	'r' 'n' name -> namespace:  1, epoch, cluster, verifier (namespace record v2)
//	'r' 'm' name -> move:       1, id, from, to, state, step, token
//	'r' 'v'      -> version (uvarint)
//
// Strings and lists are uvarint-length-prefixed. A secret is never
// stored: the node that proposes a namespace derives its verifier.

const (
	regPrefix     = 'r'
	regClusterTag = 'c'
	regNSTag      = 'n'
	regMoveTag    = 'm'
	regRecV1      = 1
	// maxRegAddrs bounds the addresses of one list of a cluster record.
	maxRegAddrs = 64
	// maxRegCA bounds a cluster record's CA certificate (PEM).
	maxRegCA = 64 << 10
	// maxRegAddr bounds one address in a cluster record (as long as a
	// member record's).
	maxRegAddr = 1024
)

var regVersionKey = []byte{regPrefix, 'v'}

func regKey(tag byte, name string) []byte {
	return append([]byte{regPrefix, tag}, name...)
}

// ValidateClusterName checks a cluster name of the registry: a
// namespace's syntax (1 to 64 bytes of letters, digits, '.', '_', '-').
func ValidateClusterName(name string) error {
	if err := wire.ValidateNamespace(name); err != nil {
		return fmt.Errorf("%w: cluster name %q", wire.ErrInvalid, name)
	}
	return nil
}

// Registry-change errors.
var (
	// ErrRegistryUnknown means the change names a cluster, namespace or
	// move the tables do not hold.
	ErrRegistryUnknown = errors.New("group: unknown in the registry tables")
	// ErrRegistryInUse refuses to remove a cluster that a namespace or an
	// unfinished move names.
	ErrRegistryInUse = errors.New("group: the cluster serves namespaces or takes part in a move")
	// ErrStaleMoveToken refuses a move put whose fencing token is below
	// the highest the move's record has seen.
	ErrStaleMoveToken = errors.New("group: stale mover fencing token")
	// ErrRegistryMoveConflict refuses a change that contradicts a move: another
	// move of the namespace is unfinished, a move already flipped cannot
	// go back or abort, a moving namespace's cluster changes only by its
	// move, an unfinished move cannot be deleted.
	ErrRegistryMoveConflict = errors.New("group: conflicts with a namespace move")
)

// regOutcome is the outcome of a registry change as every replica
// computes it. Like systable.MemberOutcome it is the applied command's
// result itself, and never leaves the node: proposeRegistry turns it into
// an error.
type regOutcome uint8

// Registry change outcomes.
const (
	// regApplied: the change was applied.
	regApplied regOutcome = iota + 1
	// regBadRecord: the command's record is malformed or incomplete.
	regBadRecord
	// regUnknown: the cluster, namespace or move named is not in the
	// tables (ErrRegistryUnknown).
	regUnknown
	// regInUse: the cluster serves namespaces or takes part in a move
	// (ErrRegistryInUse).
	regInUse
	// regStaleToken: the mover's fencing token is below the highest the
	// move's record has seen (ErrStaleMoveToken).
	regStaleToken
	// regConflict: the change conflicts with a namespace move
	// (ErrRegistryMoveConflict).
	regConflict
)

// err is the proposer's error for o, nil for regApplied.
func (o regOutcome) err() error {
	switch o {
	case regApplied:
		return nil
	case regBadRecord:
		return fmt.Errorf("%w: malformed registry record", wire.ErrInvalid)
	case regUnknown:
		return ErrRegistryUnknown
	case regInUse:
		return ErrRegistryInUse
	case regStaleToken:
		return ErrStaleMoveToken
	case regConflict:
		return ErrRegistryMoveConflict
	}
	return fmt.Errorf("group: registry change: outcome %d", uint8(o))
}

// RegistryNamespace is one namespace's assignment with its verifier.
type RegistryNamespace struct {
	adminapi.RegistryNamespace
	Verifier scramauth.Verifier
}

// RegistryTables is a copy of the registry's tables, each sorted by name.
type RegistryTables struct {
	Version    uint64
	Clusters   []adminapi.RegistryCluster
	Namespaces []RegistryNamespace
	Moves      []adminapi.RegistryMove
}

// regNS is a namespace's record in memory.
type regNS struct {
	cluster string
	epoch   uint64
	v       scramauth.Verifier
}

// registryTables is the tables in a replica's memory.
type registryTables struct {
	mu         sync.RWMutex
	version    uint64
	clusters   map[string]adminapi.RegistryCluster
	namespaces map[string]regNS
	moves      map[string]adminapi.RegistryMove
	obs        func() // told of every change (set before the group starts)
	// propose serialises this node's registry proposals, so that each
	// one's RegistryLimits check sees the outcome of the one before.
	propose sync.Mutex
}

func (t *registryTables) reset() {
	t.version = 0
	t.clusters = map[string]adminapi.RegistryCluster{}
	t.namespaces = map[string]regNS{}
	t.moves = map[string]adminapi.RegistryMove{}
}

// ---- records ----

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func (r *reader) str(limit uint64) string {
	n := r.Uvarint()
	if n > limit {
		r.Fail()
		return ""
	}
	return string(r.Bytes(n))
}

func (r *reader) strs(limit int) []string {
	n := r.Uvarint()
	if n > uint64(limit) {
		r.Fail()
		return nil
	}
	out := make([]string, 0, n)
	for i := uint64(0); i < n && !r.Failed(); i++ {
		out = append(out, r.str(maxRegAddr))
	}
	return out
}

func validRegCluster(c adminapi.RegistryCluster) error {
	if err := ValidateClusterName(c.Name); err != nil {
		return err
	}
	if len(c.Client) == 0 || len(c.Client) > maxRegAddrs || len(c.Admin) > maxRegAddrs {
		return fmt.Errorf("%w: cluster %q: 1 to %d client addresses and at most %d admin addresses", wire.ErrInvalid, c.Name, maxRegAddrs, maxRegAddrs)
	}
	for _, a := range append(append([]string(nil), c.Client...), c.Admin...) {
		if a == "" || len(a) > maxRegAddr {
			return fmt.Errorf("%w: cluster %q: address %q", wire.ErrInvalid, c.Name, a)
		}
	}
	if len(c.CA) > maxRegCA {
		return fmt.Errorf("%w: cluster %q: CA over %d bytes", wire.ErrInvalid, c.Name, maxRegCA)
	}
	return nil
}

func appendRegCluster(dst []byte, c adminapi.RegistryCluster) []byte {
	dst = append(dst, regRecV1)
	for _, l := range [][]string{c.Client, c.Admin} {
		dst = binary.AppendUvarint(dst, uint64(len(l)))
		for _, a := range l {
			dst = appendStr(dst, a)
		}
	}
	return appendStr(dst, c.CA)
}

func parseRegCluster(name string, b []byte) (adminapi.RegistryCluster, error) {
	r := newReader(b)
	c := adminapi.RegistryCluster{Name: name}
	if r.Byte() != regRecV1 {
		return c, errBadCommand
	}
	c.Client = r.strs(maxRegAddrs)
	c.Admin = r.strs(maxRegAddrs)
	c.CA = r.str(maxRegCA)
	if len(c.Admin) == 0 {
		c.Admin = nil
	}
	if !r.Done() || validRegCluster(c) != nil {
		return c, errBadCommand
	}
	return c, nil
}

// appendRegNS encodes a namespace record; its command form has epoch 0
// (the apply decides it) and may have no verifier (keep the current one).
func appendRegNS(dst []byte, n regNS, hasVerifier bool) []byte {
	dst = append(dst, regRecV1)
	dst = binary.AppendUvarint(dst, n.epoch)
	dst = appendStr(dst, n.cluster)
	if !hasVerifier {
		return binary.AppendUvarint(dst, 0)
	}
	v := systable.EncodeNamespaceRecord(n.v)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// parseRegNS decodes a namespace record; ok reports whether it holds a
// verifier.
func parseRegNS(b []byte) (n regNS, ok bool, err error) {
	r := newReader(b)
	if r.Byte() != regRecV1 {
		return n, false, errBadCommand
	}
	n.epoch = r.Uvarint()
	n.cluster = r.str(wire.MaxNamespaceLen)
	raw := r.Bytes(r.Uvarint())
	if !r.Done() || ValidateClusterName(n.cluster) != nil {
		return n, false, errBadCommand
	}
	if len(raw) == 0 {
		return n, false, nil
	}
	v, hasV, err := systable.ParseNamespaceRecord(raw)
	if err != nil || !hasV {
		return n, false, errBadCommand
	}
	n.v = v
	return n, true, nil
}

func appendRegMove(dst []byte, m adminapi.RegistryMove) []byte {
	dst = append(dst, regRecV1)
	dst = binary.AppendUvarint(dst, m.ID)
	dst = appendStr(dst, m.From)
	dst = appendStr(dst, m.To)
	dst = append(dst, byte(m.State))
	dst = binary.AppendUvarint(dst, m.Step)
	return binary.AppendUvarint(dst, m.Token)
}

func parseRegMove(ns string, b []byte) (adminapi.RegistryMove, error) {
	r := newReader(b)
	m := adminapi.RegistryMove{Namespace: ns}
	if r.Byte() != regRecV1 {
		return m, errBadCommand
	}
	m.ID = r.Uvarint()
	m.From = r.str(wire.MaxNamespaceLen)
	m.To = r.str(wire.MaxNamespaceLen)
	m.State = adminapi.MoveState(r.Byte())
	m.Step = r.Uvarint()
	m.Token = r.Uvarint()
	if !r.Done() || !m.State.Valid() || m.ID == 0 ||
		ValidateClusterName(m.From) != nil || ValidateClusterName(m.To) != nil || m.From == m.To {
		return m, errBadCommand
	}
	return m, nil
}

// ---- apply ----

// applyRegistry applies opRegCluster, opRegNamespace and opRegMove
// (group 0). A refused change writes nothing and leaves the version;
// every applied one raises it.
func (sm *StateMachine) applyRegistry(c *command, w paxos.Writer) regOutcome {
	t := &sm.reg
	t.mu.Lock()
	var o regOutcome
	switch c.op {
	case opRegCluster:
		o = t.applyCluster(c, w)
	case opRegNamespace:
		o = t.applyNamespace(c, w)
	case opRegMove:
		o = t.applyMove(c, w)
	}
	if o == regApplied {
		t.version++
		w.Set(regVersionKey, binary.AppendUvarint(nil, t.version))
	}
	obs := t.obs
	t.mu.Unlock()
	if o == regApplied && obs != nil {
		obs()
	}
	return o
}

func (t *registryTables) applyCluster(c *command, w paxos.Writer) regOutcome {
	if len(c.data) == 0 {
		if _, ok := t.clusters[c.key]; !ok {
			return regUnknown
		}
		for _, n := range t.namespaces {
			if n.cluster == c.key {
				return regInUse
			}
		}
		for _, m := range t.moves {
			if !m.State.Finished() && (m.From == c.key || m.To == c.key) {
				return regInUse
			}
		}
		delete(t.clusters, c.key)
		w.Delete(regKey(regClusterTag, c.key))
		return regApplied
	}
	rec, err := parseRegCluster(c.key, c.data)
	if err != nil {
		return regBadRecord
	}
	t.clusters[c.key] = rec
	w.Set(regKey(regClusterTag, c.key), c.data)
	return regApplied
}

func (t *registryTables) applyNamespace(c *command, w paxos.Writer) regOutcome {
	if wire.ValidateNamespace(c.key) != nil {
		return regBadRecord
	}
	cur, exists := t.namespaces[c.key]
	if len(c.data) == 0 {
		if !exists {
			return regUnknown
		}
		if m, ok := t.moves[c.key]; ok && !m.State.Finished() {
			return regConflict
		}
		delete(t.namespaces, c.key)
		w.Delete(regKey(regNSTag, c.key))
		return regApplied
	}
	n, hasV, err := parseRegNS(c.data)
	switch {
	case err != nil:
		return regBadRecord
	case !exists && !hasV:
		return regBadRecord // a new namespace needs a verifier
	}
	if _, ok := t.clusters[n.cluster]; !ok {
		return regUnknown
	}
	if !hasV {
		n.v = cur.v
	}
	switch {
	case !exists:
		n.epoch = 1
	case cur.cluster == n.cluster:
		n.epoch = cur.epoch
	default:
		if m, ok := t.moves[c.key]; ok && !m.State.Finished() {
			return regConflict // a moving namespace changes cluster by its move only
		}
		n.epoch = cur.epoch + 1
	}
	t.putNS(c.key, n, w)
	return regApplied
}

func (t *registryTables) putNS(name string, n regNS, w paxos.Writer) {
	t.namespaces[name] = n
	w.Set(regKey(regNSTag, name), appendRegNS(nil, n, true))
}

// applyMove applies a fenced put or delete of a move's record: see
// adminapi.RegistryMove for the rules.
func (t *registryTables) applyMove(c *command, w paxos.Writer) regOutcome {
	cur, exists := t.moves[c.key]
	if exists && c.token < cur.Token {
		return regStaleToken
	}
	if len(c.data) == 0 {
		switch {
		case !exists:
			return regUnknown
		case !cur.State.Finished():
			return regConflict
		}
		delete(t.moves, c.key)
		w.Delete(regKey(regMoveTag, c.key))
		return regApplied
	}
	m, err := parseRegMove(c.key, c.data)
	if err != nil {
		return regBadRecord
	}
	m.Token = max(c.token, cur.Token)
	ns, nsOK := t.namespaces[c.key]
	same := exists && cur.ID == m.ID
	switch {
	case exists && !cur.State.Finished() && !same:
		return regConflict // another move of the namespace is unfinished
	case same && (cur.From != m.From || cur.To != m.To):
		return regBadRecord
	case !same && m.State != adminapi.MovePrepare:
		return regUnknown // no such move: a stale driver's step
	case !nsOK:
		return regUnknown
	}
	if _, ok := t.clusters[m.To]; !ok {
		return regUnknown
	}
	if !same && ns.cluster != m.From {
		return regConflict // the namespace is not on From
	}
	flipped := same && cur.State.Flipped()
	if flipped && !m.State.Flipped() {
		return regConflict // after the flip a move only rolls forward
	}
	if same && cur.State.Aborts() && !m.State.Aborts() {
		return regConflict // an abort asked for is never undone
	}
	if !flipped && m.State.Flipped() && ns.cluster == m.From {
		ns.cluster = m.To
		ns.epoch++
		t.putNS(c.key, ns, w)
	}
	t.moves[c.key] = m
	w.Set(regKey(regMoveTag, c.key), appendRegMove(nil, m))
	return regApplied
}

// loadRegistry loads one record of the tables (Load; the mutex is held).
func (t *registryTables) load(k, v []byte) error {
	if string(k) == string(regVersionKey) {
		ver, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("group: registry version: %w", errBadCommand)
		}
		t.version = ver
		return nil
	}
	if len(k) < 3 {
		return nil // a newer state machine's record: kept, not read
	}
	name := string(k[2:])
	switch k[1] {
	case regClusterTag:
		c, err := parseRegCluster(name, v)
		if err != nil {
			return fmt.Errorf("group: registry cluster %q: %w", name, err)
		}
		t.clusters[name] = c
	case regNSTag:
		n, ok, err := parseRegNS(v)
		if err != nil || !ok {
			return fmt.Errorf("group: registry namespace %q: %w", name, errBadCommand)
		}
		t.namespaces[name] = n
	case regMoveTag:
		m, err := parseRegMove(name, v)
		if err != nil {
			return fmt.Errorf("group: registry move %q: %w", name, err)
		}
		t.moves[name] = m
	}
	return nil
}

// checkRegPair checks a registry record of a backup.
func checkRegPair(k, v []byte) error {
	t := registryTables{}
	t.reset()
	if err := t.load(k, v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	return nil
}
