package paxos

import (
	"slices"
)

// Rounds synced by exactly a quorum (Config.QuorumSync; docs/design.md,
// "Rounds synced by exactly a quorum"). The master asks quorum-1 followers,
// the voters, to sync and vote on each new instance; the others get the
// Accept write-only: they store it without asking their driver for a sync
// and answer nothing. A voter whose vote has not come within
// RetransmitTicks is replaced, and every follower that has not voted is
// asked to vote (a retransmitted Accept without WriteOnly): it syncs what
// it holds, then votes.
//
// Safety rests on one rule, the same for every role: a message that
// vouches for accepted entries (an Accepted, a Promise) leaves only after
// a sync that covers every entry its replica wrote, write-only ones
// included. The Core keeps it by asking for a hard-state write with the
// vote whenever write-only entries may be unsynced (unsynced, C15): the
// driver's sync of that write makes every earlier write durable. So an
// unsynced entry that a crash loses was never vouched for by any message,
// and the crash is the same as the loss of the Accept that carried it.
//
//	C15 voters is nil except on a master with QuorumSync, where it holds
//	    quorum-1 distinct members other than the master; while unsynced
//	    and no hard-state write is pending, msgsAfter holds no message
//	    that vouches for entries.

// vouchesForEntries reports whether m, a vote, vouches for accepted
// entries of its sender: an Accepted or a Promise that is not a refusal.
// A HeartbeatAck vouches for the promised ballot (synced when it changed)
// and the lease (kept in memory; a restarted acceptor waits it out), and a
// refusal for the promised ballot only.
func vouchesForEntries(m Message) bool {
	return (m.Type == MsgAccepted || m.Type == MsgPromise) && !m.Reject
}

// pickVoters chooses the master's voters: quorum-1 followers in an order
// that starts at a place set by the group id (so that the groups of a
// cluster spread their syncs over the nodes), those in answered (the
// promisers, alive a moment ago) before the others.
func (c *Core) pickVoters(answered map[NodeID]bool) {
	if !c.cfg.QuorumSync {
		c.voters = nil
		return
	}
	need := c.quorum - 1
	c.voters = make([]NodeID, 0, need)
	fs := c.followersRotated()
	for _, first := range []bool{true, false} {
		for _, p := range fs {
			if len(c.voters) < need && answered[p] == first {
				c.voters = append(c.voters, p)
			}
		}
	}
}

// followersRotated returns the members other than this replica in member
// order, rotated by the group id.
func (c *Core) followersRotated() []NodeID {
	fs := make([]NodeID, 0, len(c.mem.Members))
	for _, p := range c.mem.Members {
		if p != c.cfg.ID {
			fs = append(fs, p)
		}
	}
	if len(fs) > 1 {
		k := int(c.cfg.Group % GroupID(len(fs)))
		return slices.Concat(fs[k:], fs[:k])
	}
	return fs
}

// writeOnlyTo reports whether a new instance's Accept goes to member p
// write-only: p is not one of the master's voters.
func (c *Core) writeOnlyTo(p NodeID) bool {
	return c.voters != nil && !slices.Contains(c.voters, p)
}

// replaceLaggards swaps each voter in lagging for a follower that is
// neither a voter nor lagging, in rotated order, and asks the new voters
// to vote on every instance in flight that lacks their vote (they may
// hold it write-only). Retransmit calls it with the voters whose vote on
// an instance did not come in time.
func (c *Core) replaceLaggards(lagging []NodeID) {
	if len(lagging) == 0 || c.voters == nil {
		return
	}
	var fresh []NodeID
	for _, p := range c.followersRotated() {
		if len(fresh) == len(lagging) {
			break
		}
		if !slices.Contains(c.voters, p) && !slices.Contains(lagging, p) {
			fresh = append(fresh, p)
		}
	}
	for i, p := range fresh {
		c.voters[slices.Index(c.voters, lagging[i])] = p
	}
	if len(fresh) == 0 {
		return
	}
	for inst := c.hs.Committed + 1; inst < c.nextInst; inst++ {
		f, ok := c.inflight[inst]
		if !ok || f.done {
			continue
		}
		for _, p := range fresh {
			if !slices.Contains(f.acks, p) && f.sent != c.now {
				c.msgs = append(c.msgs, c.acceptTo(p, []Entry{f.entry}, false))
			}
		}
	}
}

// acceptTo is the master's Accept of ents to follower p.
func (c *Core) acceptTo(p NodeID, ents []Entry, writeOnly bool) Message {
	return Message{Type: MsgAccept, Group: c.cfg.Group, From: c.cfg.ID, To: p, Ballot: c.ballot,
		Entries: ents, Committed: c.hs.Committed, WriteOnly: writeOnly}
}

// acceptEntry stores e, accepted in its ballot, unless this replica holds
// it already: a request to vote on an entry held write-only writes
// nothing again, its vote waits for a sync all the same (send).
func (c *Core) acceptEntry(e Entry, writeOnly bool) {
	if old, ok := c.entries[e.Instance]; ok && old.Ballot == e.Ballot && old.Value.Same(e.Value) {
		return
	}
	c.storeEntry(e, writeOnly)
}

// checkQuorumSync checks C15.
func (c *Core) checkQuorumSync(fail failFunc) {
	if c.voters != nil {
		if c.role != master || !c.cfg.QuorumSync || len(c.voters) != c.quorum-1 {
			fail("C15: %s (quorum sync %v) with voters %v, quorum %d", c.role, c.cfg.QuorumSync, c.voters, c.quorum)
		}
		for i, p := range c.voters {
			if p == c.cfg.ID || !c.mem.Contains(p) || slices.Contains(c.voters[:i], p) {
				fail("C15: voter %d is this replica, twice or not a member of %v", p, c.mem)
			}
		}
	} else if c.role == master && c.cfg.QuorumSync {
		fail("C15: master with quorum sync and no voters")
	}
	if c.unsynced && !c.hsDirty {
		for _, m := range c.msgsAfter {
			if (m.Type == MsgAccepted || m.Type == MsgPromise) && !m.Reject {
				fail("C15: %s %d->%d vouches for entries written unsynced, and no sync is asked for", m.Type, m.From, m.To)
			}
		}
	}
}
