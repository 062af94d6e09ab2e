package group

import (
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
)

// Consensus is what a lock group needs from the replication of its state
// machine: a way to propose commands and this replica's view of who
// masters the group. *host.Replica implements it; the group's unit tests
// use a fake that decides by hand when a proposal is chosen.
//
// The replication drives the group's *StateMachine: it calls Apply with
// the chosen commands, in instance order, on every replica, and
// MasterChanged whenever this replica's view of mastership (Status)
// changes. MasterChanged with Serving false must come after Status
// already reports not serving, and before the replication lets another
// node take the group over (before a hand-off's TimeoutNow leaves): the
// lock group relies on that to order its answers against a hand-off (see
// Group.serve).
//
// Every method is safe for concurrent use and returns without waiting for
// the network or the disk.
type Consensus interface {
	// Submit proposes cmd. cb gets the outcome exactly once: the Result
	// of the StateMachine's Apply once cmd is chosen and applied on this
	// replica (Result.Value), or an error when it did not take effect
	// (paxos.ErrNotMaster, ErrOverloaded, ErrNotChosen, ErrStopped,
	// ErrTooLarge, matched with errors.Is) or its outcome is unknown
	// (paxos.ErrOutcomeUnknown: the replica stopped with it in flight).
	// cb must not block; it may run before Submit returns (an error found
	// at once), else on the replication's goroutine. The caller may not
	// modify cmd afterwards.
	Submit(cmd []byte, cb paxos.Callback)
	// Status returns this replica's latest view of mastership, without
	// waiting. Serving is true only while this node is master and its
	// lease runs now on the monotonic clock: a lock group answers from its
	// table only then.
	Status() paxos.SoftState
	// Progress returns the committed and applied instances and the first
	// instance still in the log, as this replica last saw them.
	Progress() (committed, applied, logStart uint64)
	// SetPreferred names the node that should master the group (0: none):
	// a master hands the group to it once it has caught up. It is a hint
	// that takes effect asynchronously.
	SetPreferred(id paxos.NodeID)
}

var _ Consensus = (*host.Replica)(nil)

// Replicate starts the replication of lock group g (0-based) whose state
// machine is sm and returns its Consensus. NewServiceWith calls it once
// per group, in order.
type Replicate func(g ID, sm *StateMachine) (Consensus, error)
