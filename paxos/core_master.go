package paxos

import (
	"slices"
)

// The candidate side of Core (Promise, becoming master) and the master side
// (proposing, Accepted, commit, heartbeats, retransmission, hand-off).

func (c *Core) onPromise(m Message) {
	if c.role != candidate || m.Ballot != c.ballot || !c.mem.Contains(m.From) {
		return
	}
	if !m.Reject && !c.promiseInWindow(&m) {
		// It reports an entry no honest acceptor holds (see
		// Config.MaxInstanceAhead): recovering it would propose every
		// instance up to it.
		c.refuse(RefusedInstanceAhead, m.From)
		return
	}
	if m.Reject {
		if m.Committed > c.hs.Committed && (!c.learnPending || c.now-c.learnSent >= uint64(c.cfg.RetransmitTicks)) {
			// It knows chosen instances this replica does not (one of
			// them may be a change that removed it): learn them. A Learn
			// still pending is asked again once RetransmitTicks passed,
			// as learnCommitted does: a candidate's Tick repeats none, so
			// a removed node that campaigns on would never learn it.
			c.requestLearn(m.From)
			c.learnPending = true
		}
		if c.ballot.Less(m.Hint) {
			c.stepDown(m.Hint.Round)
		}
		return
	}
	// Chosen entries the acceptor reports are learned outright.
	for _, e := range m.Entries {
		if e.Instance <= m.Committed {
			if e.Instance == c.hs.Committed+1 {
				c.store(e)
				c.setCommitted(e.Instance)
			}
			continue
		}
		if r, ok := c.recovered[e.Instance]; !ok || r.Ballot.Less(e.Ballot) {
			c.recovered[e.Instance] = e
		}
	}
	if c.confChanged {
		// A change learned chosen: the promises so far are of the old
		// set. Step campaigns again under the new one (onConfChange).
		return
	}
	if m.Snapshot && len(m.Entries) > 0 && m.Committed <= c.hs.Committed {
		// The acceptor's accepted entries did not fit one reply (they are
		// bounded by MaxMsgBytes): ask it for the rest under the same
		// ballot. Its promise counts once a reply reaches its last entry.
		c.recoverHi = max(c.recoverHi, m.Instance)
		next := m.Entries[len(m.Entries)-1].Instance + 1
		c.send(Message{Type: MsgPrepare, To: m.From, Ballot: c.ballot, Instance: next, Hint: c.released, Committed: c.hs.Committed})
		return
	}
	if m.Snapshot || m.Committed > c.hs.Committed {
		// The acceptor knows chosen instances we could not learn from
		// this reply: catch up first, campaign later.
		c.stepDown(0)
		c.requestLearn(m.From)
		c.learnPending = true
		return
	}
	c.recoverHi = max(c.recoverHi, m.Instance)
	c.promises[m.From] = true
	if len(c.promises) >= c.quorum {
		c.becomeMaster()
	}
}

func (c *Core) becomeMaster() {
	b := c.ballot
	c.role = master
	c.masterSince = c.now
	c.leaseExpiry = c.prepareTick + c.masterLeaseTicks()
	c.inflight = make(map[uint64]*inflight)
	c.ackTick = make(map[NodeID]uint64)
	c.caughtUp = make(map[NodeID]bool)
	c.pickVoters(c.promises)
	c.promises = nil
	hi := max(c.hs.Committed, c.recoverHi)
	for i := range c.recovered {
		hi = max(hi, i)
	}
	for i := c.hs.Committed + 1; i <= hi; i++ {
		r, ok := c.recovered[i]
		v := r.Value
		if !ok {
			v = Value{Origin: b} // no-op filler
		}
		c.proposeAt(i, v)
		if v.Change != nil {
			// A change may have been chosen here: nothing above it is
			// proposed under the current set (the stop rule, C14). What
			// acceptors hold above it is recovered again by the phase 1
			// that follows under the new set.
			c.changeInst = i
			c.memGen++
			hi = i
			break
		}
	}
	c.recovered = nil
	c.nextInst = hi + 1
	c.servingAt = hi
	c.lastHB = c.now
	c.setSoft(SoftState{Master: c.cfg.ID, Ballot: b, Serving: c.applied >= c.servingAt})
	c.advanceMaster()
	c.propose()
}

// --- master side ---

func (c *Core) proposeAt(inst uint64, v Value) {
	e := Entry{Instance: inst, Ballot: c.ballot, Value: v}
	c.inflight[inst] = &inflight{entry: e, sent: c.now}
	// One Entries array for every copy: messages are read-only once sent.
	ents := []Entry{e}
	c.send(Message{Type: MsgAccept, To: c.cfg.ID, Ballot: c.ballot, Entries: ents, Committed: c.hs.Committed})
	for _, p := range c.mem.Members {
		if p != c.cfg.ID {
			c.msgs = append(c.msgs, c.acceptTo(p, ents, c.writeOnlyTo(p)))
		}
	}
}

// queueStart is the capacity Propose gives an empty queue.
const queueStart = 8

// Propose queues cmd for the next instance; tag comes back in Applied.Tags
// or Failed.Tags. It returns ErrNotMaster, ErrOverloaded or ErrTooLarge at
// once when the command cannot be queued.
func (c *Core) Propose(cmd []byte, tag uint64) error {
	if c.role != master || !c.soft.Serving || c.now >= c.leaseExpiry {
		return ErrNotMaster
	}
	if len(cmd)+64 > c.cfg.MaxBatchBytes {
		return ErrTooLarge
	}
	if len(c.queue) >= c.cfg.MaxQueue {
		return ErrOverloaded
	}
	if c.queue == nil {
		// The queue's array becomes the next instance's commands; start
		// it at a size that carries a shallow round without regrowing.
		c.queue = make([][]byte, 0, queueStart)
		c.queueTags = make([]uint64, 0, queueStart)
	}
	c.queue = append(c.queue, cmd)
	c.queueTags = append(c.queueTags, tag)
	c.queueBytes += len(cmd) + 4
	return nil
}

// propose starts instances for queued commands while the window allows.
func (c *Core) propose() {
	if c.role != master || !c.soft.Serving || c.now >= c.leaseExpiry || c.changeInst != 0 {
		return
	}
	if c.pendingChange != nil && len(c.inflight) < c.cfg.MaxInflight {
		// The change goes alone into the next instance, and nothing goes
		// above it until it is chosen (the stop rule, C14).
		c.seq++
		inst := c.nextInst
		c.nextInst++
		c.mine[inst] = myProposal{origin: c.ballot, seq: c.seq, tags: []uint64{c.pendingTag}}
		c.changeInst = inst
		c.memGen++
		ch := c.pendingChange
		c.pendingChange = nil
		c.proposeAt(inst, Value{Origin: c.ballot, Seq: c.seq, Change: ch})
		return
	}
	for len(c.queue) > 0 && len(c.inflight) < c.cfg.MaxInflight && c.pendingChange == nil {
		n, bytes := 0, 24
		for n < len(c.queue) && n < c.cfg.MaxBatchCmds {
			sz := len(c.queue[n]) + 4
			if n > 0 && bytes+sz > c.cfg.MaxBatchBytes {
				break
			}
			bytes += sz
			n++
		}
		c.seq++
		cmds := c.queue[:n:n]
		tags := c.queueTags[:n:n]
		c.queue = c.queue[n:]
		c.queueTags = c.queueTags[n:]
		c.queueBytes -= bytes - 24
		inst := c.nextInst
		c.nextInst++
		c.mine[inst] = myProposal{origin: c.ballot, seq: c.seq, tags: tags}
		c.proposeAt(inst, Value{Origin: c.ballot, Seq: c.seq, Cmds: cmds})
	}
	if len(c.queue) == 0 {
		c.queue, c.queueTags = nil, nil
	}
}

func (c *Core) onAccepted(m Message) {
	if !c.masterReply(m) {
		return
	}
	f, ok := c.inflight[m.Instance]
	if !ok || f.done {
		return
	}
	if !slices.Contains(f.acks, m.From) {
		f.acks = append(f.acks, m.From)
	}
	if len(f.acks) >= c.quorum {
		f.done = true
		c.advanceMaster()
	}
}

// masterReply reports whether m is a member's positive answer to this
// master's current ballot. A refusal that names a higher ballot makes the
// master step down; anything else not counted is ignored.
func (c *Core) masterReply(m Message) bool {
	if c.role != master || m.Ballot != c.ballot || !c.mem.Contains(m.From) {
		return false
	}
	if m.Reject {
		if c.ballot.Less(m.Hint) {
			c.stepDown(m.Hint.Round)
		}
		return false
	}
	return true
}

// advanceMaster moves Committed over chosen in-flight instances.
func (c *Core) advanceMaster() {
	moved := false
	for {
		f, ok := c.inflight[c.hs.Committed+1]
		if !ok || !f.done {
			break
		}
		delete(c.inflight, c.hs.Committed+1)
		c.setCommitted(c.hs.Committed + 1)
		moved = true
	}
	// Instances learned chosen another way (a LearnReply asked for as a
	// follower that arrives after this replica won) leave the window too;
	// otherwise they hold a slot forever.
	for inst := range c.inflight {
		if inst <= c.hs.Committed {
			delete(c.inflight, inst)
			moved = true
		}
	}
	if moved {
		c.propose()
	}
}

func (c *Core) heartbeat() {
	c.lastHB = c.now
	c.hbCommitted = c.hs.Committed
	c.broadcast(Message{Type: MsgHeartbeat, Ballot: c.ballot, Committed: c.hs.Committed, Tick: c.now})
}

func (c *Core) onHeartbeatAck(m Message) {
	if !c.masterReply(m) {
		return
	}
	if m.Tick > c.ackTick[m.From] {
		c.ackTick[m.From] = m.Tick
	}
	if m.Tick == c.lastHB {
		c.caughtUp[m.From] = m.Committed >= c.hbCommitted
	}
	// The lease runs from the quorum-th most recent acknowledged send.
	ticks := make([]uint64, 0, len(c.mem.Members))
	for _, p := range c.mem.Members {
		if t, ok := c.ackTick[p]; ok {
			ticks = append(ticks, t)
		}
	}
	if len(ticks) < c.quorum {
		return
	}
	slices.Sort(ticks)
	s := ticks[len(ticks)-c.quorum]
	if exp := s + c.masterLeaseTicks(); exp > c.leaseExpiry {
		c.leaseExpiry = exp
	}
}

// retransmit sends the Accept of every instance whose votes did not come
// within RetransmitTicks again, to every member that has not voted, as a
// request to vote: with quorum sync that asks the non-voters too, and the
// voters that failed to vote are replaced (replaceLaggards).
func (c *Core) retransmit() {
	var lagging []NodeID
	// In instance order, so that a simulation replays.
	for inst := c.hs.Committed + 1; inst < c.nextInst; inst++ {
		f, ok := c.inflight[inst]
		if !ok || f.done || c.now-f.sent < uint64(c.cfg.RetransmitTicks) {
			continue
		}
		f.sent = c.now
		for _, p := range c.mem.Members {
			if p != c.cfg.ID && !slices.Contains(f.acks, p) {
				c.msgs = append(c.msgs, c.acceptTo(p, []Entry{f.entry}, false))
				if slices.Contains(c.voters, p) && !slices.Contains(lagging, p) {
					lagging = append(lagging, p)
				}
			}
		}
	}
	c.replaceLaggards(lagging)
}

func (c *Core) maybeHandOff() {
	if c.draining {
		if p := c.drainTarget(); p != 0 {
			c.TransferTo(p)
		}
		return
	}
	p := c.preferred
	if p == 0 || p == c.cfg.ID || c.now-c.masterSince < uint64(2*c.cfg.LeaseTicks) {
		return
	}
	if !c.handOffReady(p) {
		return
	}
	c.TransferTo(p)
}

// handOffReady reports whether peer p has caught up: its acknowledgement
// of the last heartbeat reported every instance committed when that
// heartbeat left. (Under steady load a peer always trails Committed now
// by the instance in flight, so comparing with it would never hand
// over.) The target recovers anything newer in its phase 1.
func (c *Core) handOffReady(p NodeID) bool {
	t, ok := c.ackTick[p]
	return ok && c.now-t <= uint64(2*c.cfg.HeartbeatTicks) && c.caughtUp[p]
}

// drainTarget is the peer a draining master hands the group to: the
// preferred node if it has caught up, else the first caught-up member in
// member order, else none yet.
func (c *Core) drainTarget() NodeID {
	if p := c.preferred; p != 0 && p != c.cfg.ID && c.mem.Contains(p) && c.handOffReady(p) {
		return p
	}
	for _, p := range c.mem.Members {
		if p != c.cfg.ID && c.handOffReady(p) {
			return p
		}
	}
	return 0
}

// Drain makes this replica give up mastership for good: while master, it
// hands the group to a caught-up peer (the preferred node first) at the
// next tick that has one, without the wait for a new master's first
// leases that placement's hand-overs observe, and as a follower it never
// campaigns, unless a peer hands it the group (TimeoutNow). A node calls
// it on its replicas before it stops.
func (c *Core) Drain() {
	c.draining = true
	if c.role == master {
		c.maybeHandOff()
	}
}

// Undrain undoes Drain: the replica campaigns again when the group has
// no master, and takes mastership back when it is handed over.
func (c *Core) Undrain() { c.draining = false }

// TransferTo hands mastership to node id: this replica stops acting as
// master at once, releases its lease and tells id to campaign. It does
// nothing unless this replica is master.
func (c *Core) TransferTo(id NodeID) {
	if c.role != master || id == c.cfg.ID || !c.mem.Contains(id) {
		return
	}
	c.handOff(id)
}

// handOff steps the master down, releases its lease and tells id to
// campaign at once.
func (c *Core) handOff(id NodeID) {
	b := c.ballot
	c.stepDown(0)
	if c.leaseBallot == b {
		c.leaseUntil = 0
	}
	c.setSoft(SoftState{Ballot: b})
	c.send(Message{Type: MsgTimeoutNow, To: id, Ballot: b})
}
