package group

// Moving a namespace to another cluster (docs/design.md, "Moving a
// namespace"): the lock clusters' side. Every lock group's move records
// are its table systable.Moves (the states, the steps' rules, the
// records and their checkpoint); this file names its types for the
// Service's callers and answers a gated namespace's requests. The master's
// workers answer early and drop what they keep for the namespace
// (waiters, deferred requests, deadlines) when a move state is applied
// (worker.onMove).

import (
	"errors"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/systable"
)

// Move commands (see commands.go for the others); key is the namespace,
// data the move id and, for opImport and opDropNamespace, more
// (systable.EncodeMoveData).
const (
	opFreeze        op = 22 // source: stop changing the namespace
	opUnfreeze      op = 23 // abort: the source serves again, the target drops what it imported
	opImport        op = 24 // target: apply a batch of the source's records
	opOwn           op = 25 // target: serve the namespace
	opDropNamespace op = 26 // source: delete the namespace's records, keep a tombstone
	opIncoming      op = 27 // target: answer MOVING until opOwn
)

// MoveState is a namespace's move state in one lock group
// (systable.MoveState).
type MoveState = systable.MoveState

// Move states.
const (
	MoveNone     = systable.MoveNone     // no record: served as usual
	MoveIncoming = systable.MoveIncoming // target before the flip: MOVING
	MoveFrozen   = systable.MoveFrozen   // source after its freeze: MOVING
	MoveOwned    = systable.MoveOwned    // target after the flip: served
	MoveDropped  = systable.MoveDropped  // source after the drop: MOVED
)

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

// gateResponse is the answer of a request gate g stops.
func gateResponse(g systable.Gate) wire.Response {
	if g.Moved {
		return wire.Response{Status: wire.StatusMoved, Redirect: g.MovedTo, Msg: "the namespace moved to another cluster"}
	}
	return wire.Response{Status: wire.StatusMoving, RetryAfterMs: MovingRetryMs, Msg: "the namespace is being moved"}
}

// gateNS returns the gate of namespace ns, false when it is served.
func (sm *StateMachine) gateNS(ns string) (systable.Gate, bool) { return sm.moves.Gate(ns) }

// gateKey returns the gate of full key's namespace.
func (sm *StateMachine) gateKey(full string) (systable.Gate, bool) {
	if !sm.moves.Gated() {
		return systable.Gate{}, false
	}
	return sm.moves.Gate(splitNS(full))
}

// moveBlocks returns the status the state machine refuses a lock command
// on full key with (MOVING, MOVED), 0 when its namespace is served.
// Called with sm.mu held.
func (sm *StateMachine) moveBlocks(full string) wire.Status {
	if sm.moves.Empty() {
		return 0
	}
	g, ok := sm.moves.Blocks(splitNS(full))
	switch {
	case !ok:
		return 0
	case g.Moved:
		return wire.StatusMoved
	}
	return wire.StatusMoving
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
	info.State, info.ID, info.MovedTo, info.Batches = sm.moves.Info(ns)
	return info
}
