package host

import (
	"context"
	"fmt"
	"github.com/paxlock/paxlock/paxos"
	"slices"
)

// The runtime side of membership: a Replica records the member set in force
// after its applied instance in its state-machine keyspace, under
// membersKey, in the same batch as the applied instance (so a restart
// loads the set of the state it loads, and replays the changes above it
// from the log), and a snapshot, which streams that keyspace, carries the
// set of its instance with it. Keys that start with 0x00 are the
// runtime's (StateMachine).

// membersKey is where a group's member set lives in its keyspace. It is
// absent until the group first records its applied instance: its set is
// paxos.Config.Peers until then.
var membersKey = []byte("\x00paxos/members")

// loadMembership reads the set recorded in a group's keyspace; the zero
// Membership if none is.
func loadMembership(r paxos.Reader) (paxos.Membership, error) {
	b, ok, err := r.Get(membersKey)
	if err != nil || !ok {
		return paxos.Membership{}, err
	}
	return paxos.DecodeMembership(b)
}

// initMembership sets the set after the applied instance from what the
// group loaded. A group that never recorded one (no change was applied
// yet, or its data predates member sets) records paxos.Config.Peers at once
// (recordInitialMembership), so that every snapshot carries its set.
func (g *Replica) initMembership(init paxos.InitState) {
	g.mem = init.Membership
	if g.mem.IsZero() && !init.NeedSnapshot {
		g.mem = paxos.Membership{Members: slices.Clone(g.cfg.Core.Peers)}
		g.memDirty = true
	}
}

// recordInitialMembership writes the set initMembership took from
// paxos.Config.Peers, if it did, before the group runs. Without it a group that
// has applied nothing yet streams snapshots without a set, and a node
// joining it keeps the set it joined with, itself included: it takes
// itself for a member before the group's log says so (and may win an
// election). No change was applied below the loaded state (its set would
// be recorded), so paxos.Config.Peers is that state's set. The write need not be
// durable: a restart before it is synced writes it again.
func (g *Replica) recordInitialMembership() error {
	if !g.memDirty {
		return nil
	}
	b := g.store.NewBatch()
	defer b.Close()
	g.writeMembership(b)
	if err := b.Commit(false); err != nil {
		return fmt.Errorf("paxos: group %d: record member set: %w", g.id, err)
	}
	return nil
}

// foldApplied folds the change a carries, if any, into the set after the
// applied instance. Only the host's loop calls it.
func (g *Replica) foldApplied(a *paxos.Applied) {
	if a.Value.Change == nil {
		return
	}
	if g.mem.IsZero() {
		g.mem = paxos.Membership{Members: slices.Clone(g.cfg.Core.Peers)}
	}
	g.mem = g.mem.Apply(*a.Value.Change)
	g.memDirty = true
}

// writeMembership adds the set to b when it changed since it was last
// written; it goes with every write of the applied instance.
func (g *Replica) writeMembership(b paxos.Batch) {
	if g.memDirty {
		b.SM(g.id).Set(membersKey, paxos.AppendMembership(nil, g.mem))
		g.memDirty = false
	}
}

// ChangeMembership proposes ch on this replica, which must be the group's
// serving master, and returns the instance that chose it once that
// instance is applied here: the change is then in force for every
// instance after it. Errors: ErrNotMaster, ErrChangeInProgress, an error
// matching ErrBadChange, ErrNotChosen (another master's value took the
// instance), ErrStopped, or ctx's error (the change may still be chosen;
// Membership tells).
func (g *Replica) ChangeMembership(ctx context.Context, ch paxos.MemberChange) (uint64, error) {
	done := make(chan paxos.Result, 1)
	cb := func(r paxos.Result) { done <- r }
	g.control(func(c *paxos.Core) {
		g.nextTag++
		if err := c.ProposeMembership(ch, g.nextTag); err != nil {
			cb(paxos.Result{Err: err})
			return
		}
		g.tags[g.nextTag] = tagged{cb: cb} // at 0: not a proposal the Observer times
	})
	select {
	case r := <-done:
		return r.Instance, r.Err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Membership returns the replica's view of the group's member set: the set
// in force after its committed instance and, on the master, a change in
// progress. Safe for concurrent use.
func (g *Replica) Membership() paxos.MemberStatus {
	if p := g.memStatus.Load(); p != nil {
		return *p
	}
	return paxos.MemberStatus{}
}

// publishMembership refreshes what Membership returns when the core's view
// changed. Only the host's loop calls it.
func (g *Replica) publishMembership() {
	if gen := g.core.MembershipGen(); gen != g.memGen || g.memStatus.Load() == nil {
		st := g.core.Membership()
		g.memStatus.Store(&st)
		g.memGen = gen
	}
}

// joinGroup makes init the state of a node that joins a running group
// with an empty store: its state machine comes from a snapshot (until
// then it neither applies nor campaigns), and the set it knows until then
// is peers, the set that includes it.
func joinGroup(init *paxos.InitState, peers []paxos.NodeID) {
	init.NeedSnapshot = true
	init.Membership = paxos.Membership{Members: slices.Clone(peers)}
}
