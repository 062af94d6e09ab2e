package paxos

// The membership side of Core: a change is a value chosen in the group's
// own log; it is in force for every instance after the one that chose it.
// Safety rests on three rules (docs/design.md, "Membership"):
//
//   - One member added or removed per change, so that a majority of the set
//     before a change and a majority of the set after it always share a
//     node.
//   - The stop rule: a master proposes nothing above a change until the
//     change is chosen (C14), and a new master that recovers a change
//     proposes nothing above it either. So every instance a master has in
//     flight is under the set it knows, the one in force after Committed.
//   - Phase 1 is per set: once a change is chosen, the master steps down
//     and runs phase 1 again under the same ballot (it has proposed nothing
//     above the change in it), so that its promises for the instances above
//     the change come from a majority of the new set; a candidate that
//     learns a change while it campaigns starts its phase 1 over the same
//     way. Acceptors hold their lease for that ballot already, so nothing
//     waits for a lease to run out.

// foldChange folds the change chosen at instance i, if any, into c.mem. It
// runs for every instance as Committed passes it.
func (c *Core) foldChange(i uint64) {
	e, ok := c.entries[i]
	if !ok && c.inflight != nil {
		if f := c.inflight[i]; f != nil {
			e, ok = f.entry, true
		}
	}
	if !ok || e.Value.Change == nil {
		return
	}
	// Even a change that does not apply (Apply leaves the set as it is)
	// ends the stop rule's wait: confChanged makes the master run phase 1
	// again, which clears it.
	c.mem = c.mem.Apply(*e.Value.Change)
	c.quorum = c.mem.Quorum()
	c.confChanged = true
	c.memGen++
}

// onConfChange acts on a change of c.mem at the end of the call that
// folded it: a master or candidate runs phase 1 again under its ballot and
// the new set (rePrepare); a master removed from the set hands the group
// to a member instead, a candidate removed from it gives up.
func (c *Core) onConfChange() {
	c.confChanged = false
	if c.preferred != 0 && !c.mem.Contains(c.preferred) {
		c.preferred = 0
	}
	if c.role == follower {
		return
	}
	if !c.mem.Contains(c.cfg.ID) {
		if target := c.handOffTarget(); c.role == master && target != 0 {
			c.handOff(target)
			return
		}
		c.stepDown(0)
		return
	}
	c.rePrepare()
}

// rePrepare makes the master or candidate a candidate of the same ballot
// and sends Prepare for every instance above Committed to the current set.
// Reusing the ballot is safe because it has no value in phase 2 above
// Committed (the stop rule), and it keeps the acceptors' leases: they
// granted them to this ballot.
func (c *Core) rePrepare() {
	b, released := c.ballot, c.released
	c.stepDown(0)
	c.role = candidate
	c.ballot = b
	c.released = released
	c.prepareTick = c.now
	c.promises = make(map[NodeID]bool)
	c.recovered = make(map[uint64]Entry)
	c.recoverHi = 0
	c.broadcast(Message{Type: MsgPrepare, Ballot: b, Instance: c.hs.Committed + 1, Hint: released, Committed: c.hs.Committed})
}

// fromRemoved answers a node removed from the group, which may not know it
// yet: its campaign is refused with this replica's committed instance, and
// its requests for chosen instances are served, so that it learns of its
// removal and stops campaigning. Nothing it says changes this replica.
func (c *Core) fromRemoved(m Message) {
	switch m.Type {
	case MsgPrepare:
		c.send(Message{Type: MsgPromise, To: m.From, Ballot: m.Ballot, Reject: true, Hint: c.hs.Promised, Committed: c.hs.Committed, LogStart: c.logStart})
	case MsgLearn:
		c.onLearn(m)
	case MsgLearnReply:
		// Chosen instances it served are chosen whoever serves them.
		c.onLearnReply(m)
	}
}

// handOffTarget picks the member a master that is no longer a member hands
// the group to: the preferred node if it is a member, else the member that
// acknowledged a heartbeat last (the first such in member order).
func (c *Core) handOffTarget() NodeID {
	if p := c.preferred; p != 0 && p != c.cfg.ID && c.mem.Contains(p) {
		return p
	}
	var best NodeID
	var bestTick uint64
	for _, p := range c.mem.Members {
		if p == c.cfg.ID {
			continue
		}
		if t := c.ackTick[p]; best == 0 || t > bestTick {
			best, bestTick = p, t
		}
	}
	return best
}

// ProposeMembership queues a membership change on the master; tag comes
// back in Applied.Tags once the change is chosen (it is in force for every
// instance after that one), or in Failed.Tags. It returns ErrNotMaster,
// ErrChangeInProgress while another change is queued or in flight, or an
// error matching ErrBadChange when ch does not apply to the current set.
// After the change is chosen the master campaigns again under the new set
// (or hands the group over, if it removed itself), so commands proposed
// meanwhile fail with ErrNotMaster and are retried by their callers.
func (c *Core) ProposeMembership(ch MemberChange, tag uint64) error {
	if c.role != master || !c.soft.Serving || c.now >= c.leaseExpiry {
		return ErrNotMaster
	}
	if c.pendingChange != nil || c.changeInst != 0 {
		return ErrChangeInProgress
	}
	if err := c.mem.Check(ch); err != nil {
		return err
	}
	c.pendingChange = &ch
	c.pendingTag = tag
	c.memGen++
	return nil
}

// MembershipGen returns a number that changes whenever what Membership
// returns may have changed, so that a driver copies it only then.
func (c *Core) MembershipGen() uint64 { return c.memGen }

// Membership returns the member set in force after the committed instance
// and, on the master, the change it has queued or in flight.
func (c *Core) Membership() MemberStatus {
	st := MemberStatus{Current: c.mem.Clone(), PendingAt: c.changeInst}
	if c.pendingChange != nil {
		ch := *c.pendingChange
		st.Pending = &ch
	} else if c.changeInst != 0 {
		if f := c.inflight[c.changeInst]; f != nil && f.entry.Value.Change != nil {
			ch := *f.entry.Value.Change
			st.Pending = &ch
		}
	}
	return st
}
