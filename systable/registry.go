package systable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// The registry's tables are replicated through lock group 0 of the meta
// cluster (any cluster whose group 0 holds them), next to the namespace
// table and the member list: the lock clusters the registry serves, each
// namespace's assignment to one of them with its SCRAM verifier, and the
// namespace moves in progress. Each table is a set of records
// (regrecord.go), written through on apply like namespace records, and
// the tables share one version that every applied change raises, so that
// a registry process that follows them can tell a newer copy from an
// older one and resume from the version it has.

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

// RegistryOutcome is the outcome of a registry change as every replica of
// group 0 computes it. It never leaves the node: the proposer turns it
// into an error (Err).
type RegistryOutcome uint8

// Registry change outcomes.
const (
	// RegistryApplied: the change was applied.
	RegistryApplied RegistryOutcome = iota + 1
	// RegistryBadRecord: the command's record is malformed or incomplete.
	RegistryBadRecord
	// RegistryUnknown: the cluster, namespace or move named is not in the
	// tables (ErrRegistryUnknown).
	RegistryUnknown
	// RegistryInUse: the cluster serves namespaces or takes part in a
	// move (ErrRegistryInUse).
	RegistryInUse
	// RegistryStaleToken: the mover's fencing token is below the highest
	// the move's record has seen (ErrStaleMoveToken).
	RegistryStaleToken
	// RegistryConflict: the change conflicts with a namespace move
	// (ErrRegistryMoveConflict).
	RegistryConflict
)

// String returns applied, bad record, unknown, in use, stale token,
// conflict, or the number of another value.
func (o RegistryOutcome) String() string {
	switch o {
	case RegistryApplied:
		return "applied"
	case RegistryBadRecord:
		return "bad record"
	case RegistryUnknown:
		return "unknown"
	case RegistryInUse:
		return "in use"
	case RegistryStaleToken:
		return "stale token"
	case RegistryConflict:
		return "conflict"
	}
	return fmt.Sprintf("RegistryOutcome(%d)", uint8(o))
}

// Err is the proposer's error for o, nil for RegistryApplied.
func (o RegistryOutcome) Err() error {
	switch o {
	case RegistryApplied:
		return nil
	case RegistryBadRecord:
		return fmt.Errorf("%w: malformed registry record", wire.ErrInvalid)
	case RegistryUnknown:
		return ErrRegistryUnknown
	case RegistryInUse:
		return ErrRegistryInUse
	case RegistryStaleToken:
		return ErrStaleMoveToken
	case RegistryConflict:
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

// Registry is the registry's tables as one replica of group 0 holds
// them. The zero value is empty tables at version 0.
type Registry struct {
	mu         sync.RWMutex
	version    uint64
	clusters   map[string]adminapi.RegistryCluster
	namespaces map[string]regNS
	moves      map[string]adminapi.RegistryMove
	obs        func() // told of every change (set before the group starts)
}

// ready makes the tables' maps of a zero Registry; t.mu is held.
func (t *Registry) ready() {
	if t.clusters == nil {
		t.reset()
	}
}

func (t *Registry) reset() {
	t.version = 0
	t.clusters = map[string]adminapi.RegistryCluster{}
	t.namespaces = map[string]regNS{}
	t.moves = map[string]adminapi.RegistryMove{}
}

// SetObserver makes f told of every change of the tables (applied or
// loaded), outside their lock. Call it before the first apply.
func (t *Registry) SetObserver(f func()) {
	t.mu.Lock()
	t.obs = f
	t.mu.Unlock()
}

// apply decides a change with f under the tables' lock; an applied one
// raises the version, and the observer is told after the lock is
// released. A refused change writes nothing and leaves the version.
func (t *Registry) apply(w paxos.Writer, f func() RegistryOutcome) RegistryOutcome {
	t.mu.Lock()
	t.ready()
	o := f()
	if o == RegistryApplied {
		t.version++
		w.Set(regVersionKey, binary.AppendUvarint(nil, t.version))
	}
	obs := t.obs
	t.mu.Unlock()
	if o == RegistryApplied && obs != nil {
		obs()
	}
	return o
}

// ApplyCluster puts cluster name's record rec (EncodeRegistryCluster's),
// or with no record removes the cluster, refused while a namespace or an
// unfinished move names it.
func (t *Registry) ApplyCluster(name string, rec []byte, w paxos.Writer) RegistryOutcome {
	return t.apply(w, func() RegistryOutcome { return t.applyCluster(name, rec, w) })
}

func (t *Registry) applyCluster(name string, rec []byte, w paxos.Writer) RegistryOutcome {
	if len(rec) == 0 {
		if _, ok := t.clusters[name]; !ok {
			return RegistryUnknown
		}
		for _, n := range t.namespaces {
			if n.cluster == name {
				return RegistryInUse
			}
		}
		for _, m := range t.moves {
			if !m.State.Finished() && (m.From == name || m.To == name) {
				return RegistryInUse
			}
		}
		delete(t.clusters, name)
		w.Delete(regKey(regClusterTag, name))
		return RegistryApplied
	}
	c, err := parseRegCluster(name, rec)
	if err != nil {
		return RegistryBadRecord
	}
	t.clusters[name] = c
	w.Set(regKey(regClusterTag, name), rec)
	return RegistryApplied
}

// ApplyNamespace assigns namespace name to the cluster of rec
// (EncodeRegistryNamespace's), or with no record removes it. A new
// namespace needs a verifier; a change of cluster raises its epoch and is
// refused while the namespace is moving.
func (t *Registry) ApplyNamespace(name string, rec []byte, w paxos.Writer) RegistryOutcome {
	return t.apply(w, func() RegistryOutcome { return t.applyNamespace(name, rec, w) })
}

func (t *Registry) applyNamespace(name string, rec []byte, w paxos.Writer) RegistryOutcome {
	if wire.ValidateNamespace(name) != nil {
		return RegistryBadRecord
	}
	cur, exists := t.namespaces[name]
	if len(rec) == 0 {
		if !exists {
			return RegistryUnknown
		}
		if m, ok := t.moves[name]; ok && !m.State.Finished() {
			return RegistryConflict
		}
		delete(t.namespaces, name)
		w.Delete(regKey(regNSTag, name))
		return RegistryApplied
	}
	n, hasV, err := parseRegNS(rec)
	switch {
	case err != nil:
		return RegistryBadRecord
	case !exists && !hasV:
		return RegistryBadRecord // a new namespace needs a verifier
	}
	if _, ok := t.clusters[n.cluster]; !ok {
		return RegistryUnknown
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
		if m, ok := t.moves[name]; ok && !m.State.Finished() {
			return RegistryConflict // a moving namespace changes cluster by its move only
		}
		n.epoch = cur.epoch + 1
	}
	t.putNS(name, n, w)
	return RegistryApplied
}

func (t *Registry) putNS(name string, n regNS, w paxos.Writer) {
	t.namespaces[name] = n
	w.Set(regKey(regNSTag, name), appendRegNS(nil, n, true))
}

// ApplyMove applies a put of namespace name's move record rec
// (EncodeRegistryMove's), or with no record a delete of a finished one,
// fenced by the mover's token: see adminapi.RegistryMove for the rules.
func (t *Registry) ApplyMove(name string, token uint64, rec []byte, w paxos.Writer) RegistryOutcome {
	return t.apply(w, func() RegistryOutcome { return t.applyMove(name, token, rec, w) })
}

func (t *Registry) applyMove(name string, token uint64, rec []byte, w paxos.Writer) RegistryOutcome {
	cur, exists := t.moves[name]
	if exists && token < cur.Token {
		return RegistryStaleToken
	}
	if len(rec) == 0 {
		switch {
		case !exists:
			return RegistryUnknown
		case !cur.State.Finished():
			return RegistryConflict
		}
		delete(t.moves, name)
		w.Delete(regKey(regMoveTag, name))
		return RegistryApplied
	}
	m, err := parseRegMove(name, rec)
	if err != nil {
		return RegistryBadRecord
	}
	m.Token = max(token, cur.Token)
	ns, nsOK := t.namespaces[name]
	same := exists && cur.ID == m.ID
	switch {
	case exists && !cur.State.Finished() && !same:
		return RegistryConflict // another move of the namespace is unfinished
	case same && (cur.From != m.From || cur.To != m.To):
		return RegistryBadRecord
	case !same && m.State != adminapi.MovePrepare:
		return RegistryUnknown // no such move: a stale driver's step
	case !nsOK:
		return RegistryUnknown
	}
	if _, ok := t.clusters[m.To]; !ok {
		return RegistryUnknown
	}
	if !same && ns.cluster != m.From {
		return RegistryConflict // the namespace is not on From
	}
	flipped := same && cur.State.Flipped()
	if flipped && !m.State.Flipped() {
		return RegistryConflict // after the flip a move only rolls forward
	}
	if same && cur.State.Aborts() && !m.State.Aborts() {
		return RegistryConflict // an abort asked for is never undone
	}
	if !flipped && m.State.Flipped() && ns.cluster == m.From {
		ns.cluster = m.To
		ns.epoch++
		t.putNS(name, ns, w)
	}
	t.moves[name] = m
	w.Set(regKey(regMoveTag, name), EncodeRegistryMove(m))
	return RegistryApplied
}

// BeginLoad empties the tables for a load from a checkpoint and keeps
// them locked until end is called, which tells the observer.
func (t *Registry) BeginLoad() (end func()) {
	t.mu.Lock()
	t.reset()
	return func() {
		obs := t.obs
		t.mu.Unlock()
		if obs != nil {
			obs()
		}
	}
}

// LoadPair reads one of the tables' pairs (IsRegistryKey) during a load.
// A key of a table this version does not know is kept, not read.
func (t *Registry) LoadPair(k, v []byte) error {
	if string(k) == string(regVersionKey) {
		ver, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("group: registry version: %w", ErrBadRegistryRecord)
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
			return fmt.Errorf("group: registry namespace %q: %w", name, ErrBadRegistryRecord)
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

// Tables returns a copy of the tables, each sorted by name.
func (t *Registry) Tables() RegistryTables {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := RegistryTables{Version: t.version}
	for _, c := range t.clusters {
		c.Client, c.Admin = slices.Clone(c.Client), slices.Clone(c.Admin)
		out.Clusters = append(out.Clusters, c)
	}
	for name, n := range t.namespaces {
		out.Namespaces = append(out.Namespaces, RegistryNamespace{
			RegistryNamespace: adminapi.RegistryNamespace{Name: name, Cluster: n.cluster, Epoch: n.epoch},
			Verifier:          n.v,
		})
	}
	for _, m := range t.moves {
		out.Moves = append(out.Moves, m)
	}
	slices.SortFunc(out.Clusters, func(a, b adminapi.RegistryCluster) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Namespaces, func(a, b RegistryNamespace) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Moves, func(a, b adminapi.RegistryMove) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

// Version returns the tables' version.
func (t *Registry) Version() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// HasNamespace reports whether the tables assign namespace ns.
func (t *Registry) HasNamespace(ns string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.namespaces[ns]
	return ok
}
