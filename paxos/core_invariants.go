package paxos

import (
	"errors"
	"fmt"
	"slices"
)

// checkInvariants reports the first relation between the Core's fields
// that does not hold (the list C1–C12 is written next to the fields, in
// core.go; C13–C14, the member set and the stop rule, in core_member.go;
// C15, quorum sync, in core_quorum.go; C16–C17, what it refuses, in
// core_refuse.go), or nil. It only reads. The simulator runs it after every event
// on every live replica; the runtime runs it after every Advance when
// built with -tags invariants (internal/invariants).
func (c *Core) checkInvariants() error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("node %d group %d: "+format, append([]any{c.cfg.ID, c.cfg.Group}, args...)...))
	}

	c.checkLog(fail)
	c.checkRoles(fail)
	c.checkReady(fail)
	c.checkMembers(fail)
	c.checkQuorumSync(fail)
	c.checkRefuse(fail)
	return errors.Join(errs...)
}

// failFunc records one broken invariant (checkInvariants).
type failFunc func(format string, args ...any)

// checkLog checks C1–C4: applied, committed, the log's bounds and the
// entries held in memory.
func (c *Core) checkLog(fail failFunc) {
	// C1: applied <= committed.
	if c.applied > c.hs.Committed {
		fail("C1: applied %d > committed %d", c.applied, c.hs.Committed)
	}
	// C2: the log starts right above the applied state at the latest,
	// unless the state machine waits for a snapshot (applied is 0 then).
	if c.needSnap {
		if c.applied != 0 {
			fail("C2: waiting for a snapshot with applied %d, want 0", c.applied)
		}
	} else if c.logStart > c.applied+1 {
		fail("C2: log start %d > applied %d + 1", c.logStart, c.applied)
	}
	if c.logStart == 0 {
		fail("C2: log start 0")
	}
	// C3: last covers what is applied, what the log held and what is
	// committed.
	if c.last < c.applied || c.last+1 < c.logStart || c.last < c.hs.Committed {
		fail("C3: last %d below applied %d, log start %d - 1 or committed %d", c.last, c.applied, c.logStart, c.hs.Committed)
	}
	// C4: entries in memory lie strictly above applied, within the log,
	// at most last, each under its own instance.
	for i, e := range c.entries {
		if i <= c.applied || i < c.logStart || i > c.last || e.Instance != i {
			fail("C4: entry %d (instance %d) outside (applied %d, last %d] or below log start %d", i, e.Instance, c.applied, c.last, c.logStart)
		}
	}
}

// checkRoles checks C5–C11: ballots, the state of each role, the proposal
// queue and the published soft state.
func (c *Core) checkRoles(fail failFunc) {
	// C5: no promise is older than the highest round seen, and a
	// candidate's or master's own ballot is its own, no lower than its
	// promise.
	if c.hs.Promised.Round > c.maxRound {
		fail("C5: promised %s above max round %d", c.hs.Promised, c.maxRound)
	}
	if c.role != follower {
		if c.ballot.Node != c.cfg.ID || c.ballot.Round > c.maxRound || c.ballot.Less(c.hs.Promised) {
			fail("C5: %s with ballot %s, promised %s, max round %d", c.role, c.ballot, c.hs.Promised, c.maxRound)
		}
	}
	// C6: phase-1 state exists exactly on a candidate.
	if c.role == candidate && (c.promises == nil || c.recovered == nil) ||
		c.role != candidate && (c.promises != nil || c.recovered != nil) {
		fail("C6: %s with promises %v, recovered %v", c.role, c.promises != nil, c.recovered != nil)
	}
	// C7: phase-2 and lease state exists only on the master.
	if c.role == master {
		if c.inflight == nil || c.ackTick == nil || c.caughtUp == nil {
			fail("C7: master without in-flight or acknowledgement maps")
		}
	} else if c.inflight != nil || c.ackTick != nil || c.caughtUp != nil || c.leaseExpiry != 0 || len(c.queue) > 0 {
		fail("C7: %s holds master state: inflight %d, ackTick %v, caughtUp %v, lease %d, queue %d",
			c.role, len(c.inflight), c.ackTick != nil, c.caughtUp != nil, c.leaseExpiry, len(c.queue))
	}
	// C8: an in-flight instance lies below nextInst and carries the
	// master's ballot under its own instance.
	for i, f := range c.inflight {
		if i >= c.nextInst || f.entry.Instance != i || f.entry.Ballot != c.ballot {
			fail("C8: in-flight %d (entry %d, ballot %s) with next %d, ballot %s", i, f.entry.Instance, f.entry.Ballot, c.nextInst, c.ballot)
		}
	}
	if c.role == master && c.nextInst <= c.hs.Committed {
		fail("C8: next instance %d not above committed %d", c.nextInst, c.hs.Committed)
	}
	// C9: the proposal queue is consistent with itself.
	if len(c.queue) != len(c.queueTags) || len(c.queue) > c.cfg.MaxQueue {
		fail("C9: queue %d commands, %d tags, max %d", len(c.queue), len(c.queueTags), c.cfg.MaxQueue)
	}
	qb := 0
	for _, q := range c.queue {
		qb += len(q) + 4
	}
	if qb != c.queueBytes {
		fail("C9: queue bytes %d, counted %d", c.queueBytes, qb)
	}
	// C10: this replica's proposals wait only for instances not yet
	// applied.
	for i := range c.mine {
		if i <= c.applied {
			fail("C10: own proposal at %d, applied %d", i, c.applied)
		}
	}
	// C11: the soft state says master exactly on the master, and serving
	// only once it applied what came before its term.
	if (c.role == master) != (c.soft.Master == c.cfg.ID) {
		fail("C11: %s with soft master %d", c.role, c.soft.Master)
	}
	if c.role == master && c.soft.Ballot != c.ballot {
		fail("C11: master of %s publishes ballot %s", c.ballot, c.soft.Ballot)
	}
	if c.soft.Serving && (c.role != master || c.applied < c.servingAt) {
		fail("C11: serving as %s with applied %d, serving at %d", c.role, c.applied, c.servingAt)
	}
}

// checkReady checks C12: which messages wait for the sync.
func (c *Core) checkReady(fail failFunc) {
	// C12: Ready's split holds: Messages carry no vote and never address
	// this replica (those are stepped at once); MessagesAfterSync carry
	// only votes. Both come from this replica and group.
	for _, m := range c.msgs {
		if isVote(m.Type) || m.To == c.cfg.ID || m.From != c.cfg.ID || m.Group != c.cfg.Group {
			fail("C12: %s %d->%d group %d among the messages that leave before the sync", m.Type, m.From, m.To, m.Group)
		}
	}
	for _, m := range c.msgsAfter {
		if !isVote(m.Type) || m.From != c.cfg.ID || m.Group != c.cfg.Group {
			fail("C12: %s %d->%d group %d among the messages that wait for the sync", m.Type, m.From, m.To, m.Group)
		}
	}
}

// checkMembers checks C13–C14: the member set and the stop rule.
func (c *Core) checkMembers(fail failFunc) {
	// C13: the member set is well formed and the quorum is its majority.
	if len(c.mem.Members) == 0 || c.quorum != c.mem.Quorum() {
		fail("C13: members %v with quorum %d", c.mem, c.quorum)
	}
	for i, id := range c.mem.Members {
		if id == 0 || slices.Contains(c.mem.Members[:i], id) || slices.Contains(c.mem.Removed, id) {
			fail("C13: member %d zero, twice or also removed in %v", id, c.mem)
		}
	}
	if c.role != follower && !c.mem.Contains(c.cfg.ID) {
		fail("C13: %s that is not a member of %v", c.role, c.mem)
	}
	// C14: the stop rule. A change is queued or in flight only on the
	// master, one at a time, and nothing is in flight above it.
	if c.role != master && (c.pendingChange != nil || c.changeInst != 0) {
		fail("C14: %s with a change queued (%v) or in flight at %d", c.role, c.pendingChange != nil, c.changeInst)
	}
	if c.pendingChange != nil && c.changeInst != 0 {
		fail("C14: change queued while another is in flight at %d", c.changeInst)
	}
	if c.changeInst != 0 {
		f := c.inflight[c.changeInst]
		if c.changeInst != c.nextInst-1 || c.changeInst <= c.hs.Committed || f == nil || f.entry.Value.Change == nil {
			fail("C14: change at %d with next %d, committed %d, in flight %v", c.changeInst, c.nextInst, c.hs.Committed, f != nil)
		}
	}
	for i, f := range c.inflight {
		if f.entry.Value.Change != nil && i != c.changeInst {
			fail("C14: change in flight at %d, tracked at %d", i, c.changeInst)
		}
		for _, p := range f.acks {
			if !c.mem.Contains(p) {
				fail("C14: instance %d counts the vote of %d, not a member of %v", i, p, c.mem)
			}
		}
		if f.done && len(f.acks) < c.quorum {
			fail("C14: instance %d done with %d votes, quorum %d of %v", i, len(f.acks), c.quorum, c.mem)
		}
	}
	if c.confChanged {
		fail("C13: a member set change was left unhandled")
	}
}

// isVote reports whether a message of type t vouches for its sender's
// durable state. It restates afterSync on purpose: C12 must not take its
// answer from the function it checks.
func isVote(t MsgType) bool {
	switch t {
	case MsgPromise, MsgAccepted, MsgHeartbeatAck:
		return true
	}
	return false
}

// String names the role, for invariant reports.
func (r role) String() string {
	switch r {
	case follower:
		return "follower"
	case candidate:
		return "candidate"
	case master:
		return "master"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// AssertInvariants panics with checkInvariants' report. The runtime calls
// it only when built with -tags invariants (internal/invariants), after it
// stepped, ticked or advanced a Core: a violation there is a bug in this
// package, not bad input, and the test that hit it must stop at once.
func (c *Core) AssertInvariants(where string) {
	if err := c.checkInvariants(); err != nil {
		panic(fmt.Sprintf("paxos: core invariant broken after %s: %v", where, err))
	}
}
