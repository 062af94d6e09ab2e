package paxos

import (
	"slices"
)

// The acceptor side of Core (Prepare, Accept, Heartbeat) and the learner
// side (Learn, LearnReply). Like all of Core: no I/O, no clock, no
// goroutines.

func (c *Core) leaseBlocks(b, released Ballot) bool {
	if c.now < c.quietUntil {
		return true
	}
	if c.now < c.leaseUntil && c.leaseBallot != b && !(released == c.leaseBallot && !released.IsZero()) {
		return true
	}
	return false
}

// onPrepare answers a candidate's Prepare, then learns what the
// candidate knows chosen (its Committed), whether it promised or refused:
// a replica that missed a commit (say, of the change that removed a node
// still campaigning with this replica's promises) would otherwise go on
// refusing the real candidate for the removed node's sake.
func (c *Core) onPrepare(m Message) {
	c.promise(m)
	c.learnFromStale(m)
}

func (c *Core) promise(m Message) {
	reply := Message{Type: MsgPromise, To: m.From, Ballot: m.Ballot, Committed: c.hs.Committed, LogStart: c.logStart}
	if m.Ballot.Less(c.hs.Promised) || c.leaseBlocks(m.Ballot, m.Hint) {
		reply.Reject = true
		reply.Hint = c.hs.Promised
		c.send(reply)
		return
	}
	if c.hs.Promised.Less(m.Ballot) && c.role == master && m.From != c.cfg.ID {
		c.stepDown(m.Ballot.Round)
	}
	c.setPromised(m.Ballot)
	c.leaseBallot = m.Ballot
	c.leaseUntil = c.now + uint64(c.cfg.LeaseTicks)
	if m.From != c.cfg.ID {
		if c.role == candidate {
			c.stepDown(0)
		}
		c.resetElection()
	}
	if m.Instance < c.logStart && m.Instance <= c.hs.Committed {
		// The candidate needs instances this acceptor no longer holds.
		reply.Snapshot = true
		c.send(reply)
		return
	}
	es, complete := c.entriesFrom(m.Instance, c.last)
	reply.Entries = es
	reply.Instance = c.last
	if !complete {
		reply.Snapshot = true
	}
	c.send(reply)
}

func (c *Core) onAccept(m Message) {
	if m.Ballot.Less(c.hs.Promised) {
		c.send(Message{Type: MsgAccepted, To: m.From, Ballot: m.Ballot, Reject: true, Hint: c.hs.Promised, Instance: firstInstance(m.Entries)})
		c.learnFromStale(m)
		return
	}
	if c.hs.Promised.Less(m.Ballot) {
		if c.role == master && m.From != c.cfg.ID {
			c.stepDown(m.Ballot.Round)
		}
		c.setPromised(m.Ballot)
	}
	if m.From != c.cfg.ID {
		c.heardFrom(m.From, m.Ballot)
	}
	window := c.acceptWindow()
	for _, e := range m.Entries {
		if e.Instance > window && m.From != c.cfg.ID {
			// Beyond the instance window: no honest master proposes it
			// while this replica is caught up, and one that lags learns
			// (learnCommitted below) and votes on the retransmission.
			c.refuse(RefusedInstanceAhead, m.From)
			continue
		}
		if e.Instance > c.hs.Committed && e.Instance >= c.logStart {
			e.Ballot = m.Ballot
			c.acceptEntry(e, m.WriteOnly)
		}
		if !m.WriteOnly {
			c.send(Message{Type: MsgAccepted, To: m.From, Ballot: m.Ballot, Instance: e.Instance})
		}
	}
	if m.From != c.cfg.ID {
		c.learnCommitted(m.Committed, m.Ballot, m.From)
	}
}

func firstInstance(es []Entry) uint64 {
	if len(es) == 0 {
		return 0
	}
	return es[0].Instance
}

func (c *Core) heardFrom(from NodeID, b Ballot) {
	if c.role == candidate && c.ballot.Less(b) {
		c.stepDown(0)
	}
	if c.role != master {
		c.resetElection()
		c.setSoft(SoftState{Master: from, Ballot: b})
	}
}

func (c *Core) onHeartbeat(m Message) {
	if m.Ballot.Less(c.hs.Promised) {
		c.send(Message{Type: MsgHeartbeatAck, To: m.From, Ballot: m.Ballot, Reject: true, Hint: c.hs.Promised})
		c.learnFromStale(m)
		return
	}
	if c.hs.Promised.Less(m.Ballot) {
		// A master this acceptor never promised: adopt it only where no
		// rival lease stands in the way.
		if c.leaseBlocks(m.Ballot, Ballot{}) {
			return
		}
		if c.role == master {
			c.stepDown(m.Ballot.Round)
		}
		c.setPromised(m.Ballot)
	}
	if c.now >= c.quietUntil {
		c.leaseBallot = m.Ballot
		c.leaseUntil = c.now + uint64(c.cfg.LeaseTicks)
	}
	if m.From != c.cfg.ID {
		c.heardFrom(m.From, m.Ballot)
		c.learnCommitted(m.Committed, m.Ballot, m.From)
	}
	if c.now >= c.quietUntil {
		c.send(Message{Type: MsgHeartbeatAck, To: m.From, Ballot: m.Ballot, Tick: m.Tick, Committed: c.hs.Committed})
	}
}

// learnFromStale learns what a master or candidate, whether or not this
// replica refused its ballot, says is chosen: what a replica announces
// chosen is chosen, whatever ballot it says it in. Without it, a replica
// that promised the ballot of a node removed without its knowing (it has
// not learned the change) would refuse the real master's messages without
// ever learning the removal.
func (c *Core) learnFromStale(m Message) {
	if m.From != c.cfg.ID && m.Committed > c.hs.Committed && c.role == follower {
		c.learnCommitted(m.Committed, m.Ballot, m.From)
	}
}

// learnCommitted advances Committed over instances whose stored entry was
// accepted in the ballot of the master that says they are chosen; for the
// rest it asks that master.
func (c *Core) learnCommitted(upto uint64, b Ballot, from NodeID) {
	for c.hs.Committed < upto {
		i := c.hs.Committed + 1
		e, ok := c.entries[i]
		if !ok || e.Ballot != b {
			break
		}
		c.setCommitted(i)
	}
	if c.hs.Committed < upto {
		if !c.learnPending || c.now-c.learnSent >= uint64(c.cfg.RetransmitTicks) {
			c.requestLearn(from)
		}
		c.learnPending = true
	} else {
		c.learnPending = false
	}
}

func (c *Core) requestLearn(from NodeID) {
	if c.awaitSnap {
		return
	}
	if from == 0 || from == c.cfg.ID {
		from = c.randomPeer()
		if from == 0 {
			return
		}
	}
	c.learnSent = c.now
	c.askedLearn(from)
	inst := c.hs.Committed + 1
	if c.needSnap {
		inst = 0 // below every log start: ask for a snapshot
	}
	c.send(Message{Type: MsgLearn, To: from, Instance: inst})
}

func (c *Core) randomPeer() NodeID {
	if n := len(c.mem.Members); n == 0 || n == 1 && c.mem.Members[0] == c.cfg.ID {
		return 0
	}
	for {
		p := c.mem.Members[c.rng.IntN(len(c.mem.Members))]
		if p != c.cfg.ID {
			return p
		}
	}
}

func (c *Core) onLearn(m Message) {
	reply := Message{Type: MsgLearnReply, To: m.From, Committed: c.hs.Committed, LogStart: c.logStart, Instance: m.Instance}
	if m.Instance < c.logStart {
		reply.Snapshot = true
		c.send(reply)
		if !slices.Contains(c.snapSend, m.From) {
			c.snapSend = append(c.snapSend, m.From)
		}
		return
	}
	if m.Instance <= c.hs.Committed {
		reply.Entries, _ = c.entriesFrom(m.Instance, c.hs.Committed)
	}
	c.send(reply)
}

func (c *Core) onLearnReply(m Message) {
	if !c.wasAsked(m.From) {
		// Only a replica asked answers a Learn: an answer from any other
		// would hold this one off learning (a snapshot announced that
		// never comes) or be taken for chosen values nobody vouched for.
		c.refuse(RefusedUnasked, m.From)
		return
	}
	c.answered(m.From)
	if m.Snapshot {
		// Stale once this replica committed the instance it asked for
		// (m.Instance) or reached the peer's log: what the snapshot would
		// replace is then known.
		if !c.needSnap && (m.Instance <= c.hs.Committed || c.hs.Committed+1 >= m.LogStart) {
			return
		}
		c.awaitSnap = true
		c.awaitSnapAt = c.now
		c.snapFrom = m.From
		return
	}
	progressed := false
	for _, e := range m.Entries {
		if e.Instance != c.hs.Committed+1 || e.Instance > m.Committed {
			continue
		}
		c.store(e)
		c.setCommitted(e.Instance)
		progressed = true
	}
	c.learnPending = c.hs.Committed < m.Committed
	if progressed && c.learnPending {
		c.requestLearn(m.From)
	}
	if progressed && c.role == master {
		c.advanceMaster()
	}
}
