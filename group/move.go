package group

// Moving a namespace to another cluster (docs/design.md, "Moving a
// namespace"): the lock clusters' side.
//
// Every lock group keeps, per namespace that is or was moving, a move
// record under movePrefix: its state, the move's id, the other cluster's
// client addresses (a dropped namespace's) and the import batches it has
// applied. No record is the usual case: the group serves the namespace.
//
//	incoming  the target, before the flip: imports are applied, every
//	          request of the namespace is answered MOVING
//	frozen    the source, from its opFreeze on: nothing of the
//	          namespace changes (the state machine refuses every lock
//	          command of it), requests are answered MOVING
//	owned     the target, from its opOwn on: served as usual
//	dropped   the source, from its opDropNamespace on: the namespace's
//	          records are gone, requests are answered MOVED with the
//	          target's addresses (a tombstone)
//
// The state machine decides (a follower and a replay reach the same
// table); the master's workers answer early and drop what they keep for
// the namespace (waiters, deferred requests, deadlines) when a move
// state is applied (worker.onMove). Move records are written at
// checkpoints with the lock records they go with, so that a restart
// never finds an import recorded as applied whose records it lacks.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/paxlock/paxlock/wire"
)

// Move commands (see commands.go for the others); key is the namespace,
// data the move id (moveData) and, for opImport and opDropNamespace, more.
const (
	opFreeze        op = 22 // source: stop changing the namespace
	opUnfreeze      op = 23 // abort: the source serves again, the target drops what it imported
	opImport        op = 24 // target: apply a batch of the source's records
	opOwn           op = 25 // target: serve the namespace
	opDropNamespace op = 26 // source: delete the namespace's records, keep a tombstone
	opIncoming      op = 27 // target: answer MOVING until opOwn
)

// movePrefix keys a namespace's move record: 'v' + namespace.
const movePrefix = 'v'

// moveRecVersion is the version byte of a move record.
const moveRecVersion = 1

// MoveState is a namespace's move state in one lock group.
type MoveState uint8

// Move states.
const (
	MoveNone     MoveState = iota // no record: served as usual
	MoveIncoming                  // target before the flip: MOVING
	MoveFrozen                    // source after its freeze: MOVING
	MoveOwned                     // target after the flip: served
	MoveDropped                   // source after the drop: MOVED
)

var moveStateNames = [...]string{"none", "incoming", "frozen", "owned", "dropped"}

// String returns the state's name as the admin API shows it.
func (s MoveState) String() string {
	if int(s) < len(moveStateNames) {
		return moveStateNames[s]
	}
	return fmt.Sprintf("MoveState(%d)", s)
}

// MovingRetryMs is the RetryAfterMs of a MOVING answer.
const MovingRetryMs = 100

// Errors of the move steps.
var (
	// ErrMoveConflict: the namespace's move state in the group does not
	// allow the step (another move's id, or a state the step does not
	// follow). Nothing changed.
	ErrMoveConflict = errors.New("group: the namespace's move state does not allow this step")
	// ErrNamespaceMoving: the namespace is being moved to or from this
	// cluster; nothing of it changes until the move's flip or abort.
	ErrNamespaceMoving = errors.New("group: the namespace is being moved")
	// ErrNamespaceMoved: the namespace is served by another cluster (the
	// error names its client addresses).
	ErrNamespaceMoved = errors.New("group: the namespace moved to another cluster")
	// ErrMoveBadBatch: an import batch is malformed or holds a record of
	// another namespace. Nothing changed.
	ErrMoveBadBatch = errors.New("group: bad move batch")
)

// batchID names an import batch: the source group and its batch number.
type batchID struct {
	src   uint32
	batch uint32
}

// moveRec is a namespace's move record in one group.
type moveRec struct {
	st      MoveState
	id      string
	movedTo string // dropped: the target's client addresses, comma-separated
	// aborted: a tombstone restored by the abort of move id (the
	// namespace had moved away before and was moving back), so that the
	// abort repeated succeeds.
	aborted bool
	batches map[batchID]struct{}
	// fence is the highest mover-lock token of a step applied: a step
	// with a lower one is refused, so that a driver that stalled past its
	// lock's lease cannot freeze, unfreeze or drop the namespace behind
	// the back of the driver that took over. A record in state none
	// keeps only the fence (the namespace is served as usual).
	fence uint64
}

func encodeMoveRec(dst []byte, r *moveRec) []byte {
	dst = append(dst, moveRecVersion, byte(r.st))
	dst = appendValue(dst, r.id)
	dst = appendValue(dst, r.movedTo)
	var flags byte
	if r.aborted {
		flags |= 1
	}
	dst = append(dst, flags)
	bs := make([]batchID, 0, len(r.batches))
	for b := range r.batches {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b batchID) int {
		if a.src != b.src {
			return int(a.src) - int(b.src)
		}
		return int(a.batch) - int(b.batch)
	})
	dst = binary.AppendUvarint(dst, uint64(len(bs)))
	for _, b := range bs {
		dst = binary.AppendUvarint(dst, uint64(b.src))
		dst = binary.AppendUvarint(dst, uint64(b.batch))
	}
	return binary.AppendUvarint(dst, r.fence)
}

func decodeMoveRec(b []byte) (*moveRec, error) {
	r := newReader(b)
	if r.Byte() != moveRecVersion {
		return nil, fmt.Errorf("group: move record version: %w", errBadCommand)
	}
	m := &moveRec{st: MoveState(r.Byte())}
	m.id = string(r.Bytes(r.Uvarint()))
	m.movedTo = string(r.Bytes(r.Uvarint()))
	flags := r.Byte()
	m.aborted = flags&1 != 0
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		return nil, errBadCommand
	}
	for i := uint64(0); i < n && !r.Failed(); i++ {
		if m.batches == nil {
			m.batches = make(map[batchID]struct{})
		}
		m.batches[batchID{src: r.u32(), batch: r.u32()}] = struct{}{}
	}
	m.fence = r.Uvarint()
	if !r.Done() || m.st > MoveDropped || (m.st == MoveNone && m.fence == 0) || flags&^1 != 0 {
		return nil, errBadCommand
	}
	return m, nil
}

// gate is what the master answers a namespace's requests with while its
// move state keeps it from serving them.
type gate struct {
	status  wire.Status // MOVING or MOVED
	movedTo string
}

// response is the answer of a request the gate stops.
func (g gate) response() wire.Response {
	if g.status == wire.StatusMoved {
		return wire.Response{Status: wire.StatusMoved, Redirect: g.movedTo, Msg: "the namespace moved to another cluster"}
	}
	return wire.Response{Status: wire.StatusMoving, RetryAfterMs: MovingRetryMs, Msg: "the namespace is being moved"}
}

// gateOf returns the gate of a move state, false for a served one.
func (r *moveRec) gate() (gate, bool) {
	switch r.st {
	case MoveIncoming, MoveFrozen:
		return gate{status: wire.StatusMoving}, true
	case MoveDropped:
		return gate{status: wire.StatusMoved, movedTo: r.movedTo}, true
	}
	return gate{}, false
}

// publishGates rebuilds the gates the workers read from sm.moves (called
// with sm.mu held, after a change). The map is replaced, never changed,
// so a worker reads it with one atomic load and no lock; nil when no
// namespace is gated, the usual case.
func (sm *StateMachine) publishGates() {
	var m map[string]gate
	for ns, r := range sm.moves {
		if g, ok := r.gate(); ok {
			if m == nil {
				m = make(map[string]gate)
			}
			m[ns] = g
		}
	}
	if m == nil {
		sm.gates.Store(nil)
		return
	}
	sm.gates.Store(&m)
}

// gateNS returns the gate of namespace ns, false when it is served.
func (sm *StateMachine) gateNS(ns string) (gate, bool) {
	p := sm.gates.Load()
	if p == nil {
		return gate{}, false
	}
	g, ok := (*p)[ns]
	return g, ok
}

// gateKey returns the gate of full key's namespace.
func (sm *StateMachine) gateKey(full string) (gate, bool) {
	if sm.gates.Load() == nil {
		return gate{}, false
	}
	return sm.gateNS(splitNS(full))
}

// moveBlocks returns the status the state machine refuses a lock command
// on full key with (MOVING, MOVED), 0 when its namespace is served.
// Called with sm.mu held.
func (sm *StateMachine) moveBlocks(full string) wire.Status {
	if len(sm.moves) == 0 {
		return 0
	}
	r := sm.moves[splitNS(full)]
	if r == nil {
		return 0
	}
	g, ok := r.gate()
	if !ok {
		return 0
	}
	return g.status
}

// MoveInfo is a namespace's move state in one group, as this replica has
// applied it.
type MoveInfo struct {
	State   MoveState
	ID      string
	MovedTo string
	// Batches is how many import batches the group applied.
	Batches int
	// Locks is how many keys of the namespace the group holds.
	Locks int64
}

// MoveInfo returns namespace ns's move state in the group.
func (sm *StateMachine) MoveInfo(ns string) MoveInfo {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	info := MoveInfo{Locks: sm.nsHeld[ns].keys}
	if r := sm.moves[ns]; r != nil {
		info.State, info.ID, info.MovedTo, info.Batches = r.st, r.id, r.movedTo, len(r.batches)
	}
	return info
}

// loadMove loads a move record (Load, sm.mu held).
func (sm *StateMachine) loadMove(k, v []byte) error {
	r, err := decodeMoveRec(v)
	if err != nil {
		return fmt.Errorf("group: move record of %q: %w", k[1:], err)
	}
	if sm.moves == nil {
		sm.moves = make(map[string]*moveRec)
	}
	sm.moves[string(k[1:])] = r
	return nil
}

// checkpointMoves writes the move records changed since the last
// checkpoint (sm.mu held).
func (sm *StateMachine) checkpointMoves(w interface {
	Set(k, v []byte)
	Delete(k []byte)
}) {
	for ns := range sm.moveDirty {
		k := append([]byte{movePrefix}, ns...)
		if r := sm.moves[ns]; r != nil {
			w.Set(k, encodeMoveRec(nil, r))
		} else {
			w.Delete(k)
		}
	}
	clear(sm.moveDirty)
}

// noteMove records that ns's move record changed: for the next
// checkpoint, the workers' gates and the master's workers (sm.mu held).
func (sm *StateMachine) noteMove(ns string) {
	if sm.moveDirty == nil {
		sm.moveDirty = make(map[string]struct{})
	}
	sm.moveDirty[strings.Clone(ns)] = struct{}{}
	sm.publishGates()
	st := MoveNone
	if r := sm.moves[ns]; r != nil {
		st = r.st
	}
	sm.moveNews = append(sm.moveNews, moveNews{ns: strings.Clone(ns), st: st})
}

// moveNews is a move state applied, for the master's workers.
type moveNews struct {
	ns string
	st MoveState
}

// moveData encodes a move command's data: the id, then the rest.
func moveData(id string, rest []byte) []byte {
	b := appendValue(make([]byte, 0, len(id)+len(rest)+binary.MaxVarintLen64), id)
	return append(b, rest...)
}

// splitMoveData reads the id moveData put first and returns the rest.
func splitMoveData(b []byte) (id string, rest []byte, ok bool) {
	r := newReader(b)
	id = string(r.Bytes(r.Uvarint()))
	return id, r.Rest(), !r.Failed()
}
