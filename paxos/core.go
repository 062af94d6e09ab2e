package paxos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

type role uint8

const (
	follower role = iota
	candidate
	master
)

type inflight struct {
	entry Entry
	acks  []NodeID
	sent  uint64 // tick of the last (re)send
	done  bool
}

type myProposal struct {
	origin Ballot
	seq    uint64
	tags   []uint64
}

// Core is the deterministic Multi-Paxos state machine of one group on one
// replica. It is not safe for concurrent use; one goroutine drives it.
//
// Between any two calls from its driver, its fields satisfy C1–C17
// (C1–C12 written next to the fields they relate, C13–C14 about the member
// set in core_member.go and core_invariants.go, C15 about quorum sync in
// core_quorum.go, C16–C17 about what it refuses in core_refuse.go;
// checkInvariants checks them,
// the simulator after every event, the runtime under -tags invariants):
//
//	C1  applied <= hs.Committed
//	C2  logStart >= 1, and logStart <= applied+1 unless needSnap, in
//	    which case applied == 0
//	C3  last >= applied, last >= logStart-1, last >= hs.Committed
//	C4  every entries[i] has applied < i <= last, i >= logStart and
//	    Instance == i
//	C5  hs.Promised.Round <= maxRound; a candidate's or master's ballot
//	    is its own (Node == ID), of a round <= maxRound, and not below
//	    hs.Promised
//	C6  promises and recovered are non-nil exactly on a candidate
//	C7  inflight, ackTick, caughtUp are non-nil exactly on the master;
//	    elsewhere leaseExpiry == 0 and the queue is empty
//	C8  every inflight[i] has i < nextInst, entry.Instance == i and
//	    entry.Ballot == ballot; on the master nextInst > hs.Committed
//	C9  len(queue) == len(queueTags) <= MaxQueue, and queueBytes is
//	    the sum of len(cmd)+4 over queue
//	C10 every key of mine is above applied
//	C11 soft.Master == ID exactly on the master, whose soft.Ballot is
//	    its ballot; soft.Serving only on the master with
//	    applied >= servingAt
//	C12 msgs holds no vote (afterSync) and nothing addressed to this
//	    replica; msgsAfter holds only votes; both are from this
//	    replica and group
type Core struct {
	cfg Config
	// mem is the member set in force for the instance after Committed
	// (every change chosen at or below Committed folded in), and quorum
	// its majority (C13). Votes, promises and lease acknowledgements are
	// counted only from mem's members.
	mem    Membership
	quorum int
	// confChanged says a change was folded into mem since the last call
	// returned; the call handles it before it returns (onConfChange).
	confChanged bool
	// pendingChange is a membership change queued on the master, with its
	// tag; changeInst is the instance of the change the master has in
	// flight, nothing being in flight above it (C14).
	pendingChange *MemberChange
	pendingTag    uint64
	changeInst    uint64
	memGen        uint64 // changes with mem, pendingChange or changeInst
	rng           *rand.Rand
	log           LogReader

	now uint64 // local ticks since start

	hs      HardState // hs.Committed >= applied (C1)
	hsDirty bool      // Promised changed: persist synchronously
	// Committed changed: persist with the next write, no sync needed
	// (a replica relearns it)
	commitDirty bool
	logStart    uint64 // first instance in the log; <= applied+1 (C2)
	last        uint64 // highest instance stored; >= applied, committed (C3)
	applied     uint64 // highest instance handed out in Apply; 0 while needSnap (C2)
	// entries holds the stored entries above applied, up to last (C4);
	// those at or below applied are read from the log.
	entries map[uint64]Entry
	// unsynced: entries written write-only (or loaded at start) may not
	// be synced, so a vote on entries syncs first (C15); entsSync: newEnts
	// hold an entry that is not write-only.
	unsynced bool
	entsSync bool

	// acceptor lease
	leaseBallot Ballot
	leaseUntil  uint64
	quietUntil  uint64 // no promises to anyone before this tick (after restart)

	role      role
	soft      SoftState // names this replica exactly when it is master (C11)
	softDirty bool
	lastHeard uint64
	electAt   uint64 // tick at which a follower campaigns
	maxRound  uint64 // highest round seen; >= hs.Promised.Round (C5)
	preferred NodeID
	draining  bool // Drain: hand mastership away, never campaign by itself

	// candidate; ballot stays set on the master (C5). promises and
	// recovered exist only on a candidate (C6).
	ballot      Ballot
	prepareTick uint64
	promises    map[NodeID]bool
	recovered   map[uint64]Entry // highest-ballot accepted value per instance from promises
	recoverHi   uint64           // highest instance any promising acceptor stored
	released    Ballot           // hand-off: the ballot whose master released the lease

	// master: inflight, ackTick and caughtUp exist, leaseExpiry is set
	// and the queue holds commands only on the master (C7).
	leaseExpiry uint64
	nextInst    uint64               // > committed (C8)
	inflight    map[uint64]*inflight // instances below nextInst, in ballot (C8)
	seq         uint64
	queue       [][]byte // with queueTags and queueBytes: C9
	queueTags   []uint64
	queueBytes  int
	ackTick     map[NodeID]uint64
	// hbCommitted is Committed when the last heartbeat left; caughtUp[p]
	// says p's acknowledgement of that heartbeat reported at least it.
	hbCommitted uint64
	caughtUp    map[NodeID]bool
	lastHB      uint64
	servingAt   uint64 // applied instance at which the master may serve
	masterSince uint64
	// voters: the followers asked to sync and vote on new instances
	// (Config.QuorumSync; C15)
	voters []NodeID

	// proposals of this replica still waiting for their instance to
	// apply, by instance (above applied: C10)
	mine map[uint64]myProposal

	// follower catch-up
	learnSent    uint64
	learnPending bool
	awaitSnap    bool
	needSnap     bool
	awaitSnapAt  uint64
	// learnAsked: the peers sent a Learn and not yet heard back from
	// (C16); snapFrom: the peer whose snapshot is awaited (C17).
	learnAsked []NodeID
	snapFrom   NodeID
	refused    Refusals // peers' messages and entries refused, by reason (core_refuse.go)
	refusedBy  NodeID   // the sender of the last one refused

	// output
	msgs      []Message // requests to peers; no vote, nothing to itself (C12)
	msgsAfter []Message // votes and promises only: leave after the sync (C12)
	newEnts   []Entry
	applyBuf  []Applied // Ready's Apply, kept for reuse between Readys
	failed    []Failed
	snapSend  []NodeID
}

// NewCore returns a Core that resumes from st.
func NewCore(cfg Config, st InitState, lr LogReader) (*Core, error) {
	cfg.EnsureDefaults()
	if err := cfg.validate(st.Membership.IsZero()); err != nil {
		return nil, err
	}
	mem := st.Membership.Clone()
	if mem.IsZero() {
		mem = Membership{Members: slices.Clone(cfg.Peers)}
	}
	c := &Core{
		cfg:      cfg,
		mem:      mem,
		quorum:   mem.Quorum(),
		rng:      rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID)<<32|uint64(cfg.Group))),
		log:      lr,
		hs:       st.Hard,
		logStart: max(st.LogStart, 1),
		applied:  st.Applied,
		entries:  make(map[uint64]Entry),
		mine:     make(map[uint64]myProposal),
	}
	if c.hs.Committed < c.applied {
		c.hs.Committed = c.applied
	}
	c.last = max(c.applied, c.logStart-1)
	for _, e := range st.Entries {
		if e.Instance > c.applied {
			c.entries[e.Instance] = e
			c.last = max(c.last, e.Instance)
			// What a restarted replica loaded may never have been
			// synced: its first vote on entries syncs it.
			c.unsynced = true
		}
	}
	// Changes chosen above the applied state are in force already.
	if !st.NeedSnapshot {
		c.foldRange(c.applied+1, c.hs.Committed)
	}
	c.confChanged = false
	c.maxRound = c.hs.Promised.Round
	if st.NeedSnapshot {
		c.needSnap = true
		c.applied = 0
	}
	// A restarted acceptor forgot when its promises' leases end: it
	// promises nobody until any lease it may have granted has run out.
	// One that never promised anything granted no lease.
	if !c.hs.Promised.IsZero() {
		c.quietUntil = uint64(c.cfg.LeaseTicks) + 1
	}
	c.resetElection()
	return c, nil
}

// masterLeaseTicks is how long a master may count on a lease after it sent
// the Prepare or Heartbeat that a majority acknowledged. An acceptor's lease
// lasts at least (LeaseTicks-1) of its ticks from receipt; with rates within
// 1±MaxDrift of real time that is at least (LeaseTicks-1)/(1+d) real time,
// while the master's (L+1) ticks last at most (L+1)/(1-d).
func (c *Core) masterLeaseTicks() uint64 {
	d := c.cfg.MaxDrift
	l := int(float64(c.cfg.LeaseTicks-1)*(1-d)/(1+d)) - 2
	if l < 1 {
		l = 1
	}
	return uint64(l)
}

func (c *Core) resetElection() {
	c.lastHeard = c.now
	base := c.cfg.LeaseTicks + c.cfg.CampaignSlackTicks
	spread := c.cfg.LeaseTicks / 2 // the jitter range
	switch {
	case c.preferred == 0 || c.preferred == c.cfg.ID:
	case c.preferred != c.soft.Master:
		// Let the preferred node win when it is alive.
		base += c.cfg.LeaseTicks / 2
	case c.cfg.ID != c.successor(c.preferred):
		// The master that went silent is the preferred node itself.
		// Waiting the extra half lease for it would delay every take-over
		// for nothing, and campaigning all at once lets two candidates
		// that each promised themselves hold each other off for a lease.
		// So the next node in the member order goes first, the others
		// once a whole jitter range later.
		base += c.cfg.LeaseTicks/2 + 1
	default:
		// This node is that successor. Nobody campaigns against it for
		// half a lease past its base, so its jitter only has to spread
		// its groups' campaigns a little: a tenth of a lease instead of
		// half takes up to 0.4 s off a take-over with the default 1 s
		// lease (measured with make bench-failover).
		spread = c.cfg.LeaseTicks / 10
	}
	c.electAt = c.now + uint64(base+c.rng.IntN(spread+1))
}

// Status returns the replica's view of mastership.
func (c *Core) Status() SoftState { return c.soft }

// Committed returns the highest instance known chosen with all below it.
func (c *Core) Committed() uint64 { return c.hs.Committed }

// AppliedIndex returns the highest instance handed out for apply.
func (c *Core) AppliedIndex() uint64 { return c.applied }

// LogStart returns the first instance still held in the log.
func (c *Core) LogStart() uint64 { return c.logStart }

// NeedsSnapshot reports whether the replica waits for a snapshot before it
// applies anything (it joined with an empty store, or an install was cut
// short): its state machine holds nothing to give.
func (c *Core) NeedsSnapshot() bool { return c.needSnap }

// Now returns the number of ticks since the Core started.
func (c *Core) Now() uint64 { return c.now }

// IsMaster reports whether this replica is master with a valid lease.
func (c *Core) IsMaster() bool { return c.role == master && c.now < c.leaseExpiry }

// LeaseExpiry returns the tick at which the master's lease ends, 0 if
// this replica is not master.
func (c *Core) LeaseExpiry() uint64 {
	if c.role != master {
		return 0
	}
	return c.leaseExpiry
}

// SetPreferred names the node that should be master (the placement hint);
// 0 turns balancing off. A master hands the group over to the preferred node
// once that node is alive and caught up.
func (c *Core) SetPreferred(id NodeID) {
	if id != 0 && !c.mem.Contains(id) {
		return
	}
	c.preferred = id
}

// successor returns the member after id in the configured order
// (wrapping around): the stand-in campaigner when id, the preferred
// master, went silent.
func (c *Core) successor(id NodeID) NodeID {
	i := slices.Index(c.mem.Members, id)
	return c.mem.Members[(i+1)%len(c.mem.Members)]
}

func (c *Core) setSoft(s SoftState) {
	if s != c.soft {
		c.soft = s
		c.softDirty = true
	}
}

// send queues m. A vote or promise (afterSync) waits for the driver's sync
// even when it is addressed to this replica; a request to this replica is
// stepped at once.
func (c *Core) send(m Message) {
	m.Group = c.cfg.Group
	m.From = c.cfg.ID
	if afterSync(m.Type) {
		if c.unsynced && vouchesForEntries(m) {
			c.hsDirty = true // the sync that makes it durable covers them
		}
		c.msgsAfter = append(c.msgsAfter, m)
		return
	}
	if m.To == c.cfg.ID {
		c.Step(m)
		return
	}
	c.msgs = append(c.msgs, m)
}

func (c *Core) broadcast(m Message) {
	for _, p := range c.mem.Members {
		m.To = p
		c.send(m)
	}
}

func (c *Core) setPromised(b Ballot) {
	if c.hs.Promised.Less(b) {
		c.hs.Promised = b
		c.hsDirty = true
		if b.Round > c.maxRound {
			c.maxRound = b.Round
		}
	}
}

func (c *Core) setCommitted(i uint64) {
	if i > c.hs.Committed {
		c.foldRange(c.hs.Committed+1, i)
		c.hs.Committed = i
		c.commitDirty = true
	}
}

// store records e as accepted (or learned chosen) and schedules it to be
// persisted and synced.
func (c *Core) store(e Entry) { c.storeEntry(e, false) }

// storeEntry is store; writeOnly asks for no sync (a non-voter's copy).
func (c *Core) storeEntry(e Entry, writeOnly bool) {
	if e.Instance <= c.applied || e.Instance < c.logStart {
		return
	}
	if writeOnly {
		c.unsynced = true
	} else {
		c.entsSync = true
	}
	c.entries[e.Instance] = e
	c.newEnts = append(c.newEnts, e)
	if e.Instance > c.last {
		c.last = e.Instance
	}
}

// Tick advances the Core's clock by one tick.
func (c *Core) Tick() {
	c.now++
	if c.awaitSnap && c.now-c.awaitSnapAt > uint64(4*c.cfg.LeaseTicks) {
		c.awaitSnap = false // the stream never came; ask again
	}
	switch c.role {
	case follower:
		if c.needSnap && !c.awaitSnap && c.now-c.learnSent >= uint64(c.cfg.LeaseTicks) {
			c.requestLearn(c.soft.Master)
		}
		if c.now >= c.electAt && !c.needSnap && !c.draining && c.mem.Contains(c.cfg.ID) {
			c.campaign(Ballot{})
		} else if c.learnPending && c.now-c.learnSent >= uint64(c.cfg.RetransmitTicks) {
			c.requestLearn(c.soft.Master)
		}
	case candidate:
		if c.now >= c.electAt {
			c.campaign(Ballot{})
		}
	case master:
		if c.now >= c.leaseExpiry {
			c.stepDown(0)
			return
		}
		hb := uint64(c.cfg.HeartbeatTicks)
		if (c.now+c.cfg.TickPhase)%hb == 0 || c.now-c.lastHB >= hb {
			c.heartbeat()
		}
		c.retransmit()
		c.maybeHandOff()
	}
	if c.confChanged {
		c.onConfChange()
	}
}

func (c *Core) campaign(released Ballot) {
	// A replica that is not a member, or whose state machine waits for a
	// snapshot (one that just joined), does not campaign: the second
	// could win and never serve, holding the group with its lease.
	if c.role == master || !c.mem.Contains(c.cfg.ID) || c.needSnap {
		return
	}
	c.role = candidate
	// Saturating: a round that reached MaxUint64 (plausible keeps peers
	// from pushing it there) does not wrap to the lowest ballot.
	c.maxRound = satAdd(c.maxRound, 1)
	c.ballot = Ballot{Round: c.maxRound, Node: c.cfg.ID}
	c.prepareTick = c.now
	c.promises = make(map[NodeID]bool)
	c.recovered = make(map[uint64]Entry)
	c.recoverHi = 0
	c.released = released
	c.resetElection()
	c.broadcast(Message{Type: MsgPrepare, Ballot: c.ballot, Instance: c.hs.Committed + 1, Hint: released, Committed: c.hs.Committed})
}

// Campaign makes this replica try to become master now.
func (c *Core) Campaign() { c.campaign(Ballot{}) }

func (c *Core) stepDown(seen uint64) {
	if seen > c.maxRound {
		c.maxRound = seen
	}
	wasMaster := c.role == master
	c.role = follower
	c.promises = nil
	c.recovered = nil
	if wasMaster {
		c.flushQueue(ErrNotMaster)
		if c.pendingChange != nil {
			c.failed = append(c.failed, Failed{Tags: []uint64{c.pendingTag}, Err: ErrNotMaster})
			c.pendingChange = nil
		}
		c.changeInst = 0
		c.memGen++
		c.inflight = nil
		c.voters = nil
		c.ackTick = nil
		c.caughtUp = nil
		c.leaseExpiry = 0
		c.setSoft(SoftState{})
	}
	c.resetElection()
}

func (c *Core) flushQueue(err error) {
	if len(c.queueTags) > 0 {
		c.failed = append(c.failed, Failed{Tags: c.queueTags, Err: err})
	}
	c.queue, c.queueTags, c.queueBytes = nil, nil, 0
}

// Step processes one message addressed to this replica.
func (c *Core) Step(m Message) {
	// A sender this replica does not know as a member may be one added by
	// a change it has not learned yet (and which it can learn only by
	// listening to it): its messages are taken, but its votes count only
	// once it is a member (onPromise, onAccepted, onHeartbeatAck). A
	// removed node is not heard again, except to tell it what it missed
	// (fromRemoved).
	if m.Group != c.cfg.Group || m.To != c.cfg.ID || m.From == 0 {
		return
	}
	if why, ok := c.plausible(&m); !ok {
		c.refuse(why, m.From)
		return
	}
	if slices.Contains(c.mem.Removed, m.From) {
		// What it serves can be a change chosen (a LearnReply): acted on
		// before Step returns, like any other.
		c.fromRemoved(m)
		if c.confChanged {
			c.onConfChange()
		}
		return
	}
	if m.Ballot.Round > c.maxRound {
		c.maxRound = m.Ballot.Round
	}
	switch m.Type {
	case MsgPrepare:
		c.onPrepare(m)
	case MsgPromise:
		c.onPromise(m)
	case MsgAccept:
		c.onAccept(m)
	case MsgAccepted:
		c.onAccepted(m)
	case MsgHeartbeat:
		c.onHeartbeat(m)
	case MsgHeartbeatAck:
		c.onHeartbeatAck(m)
	case MsgLearn:
		c.onLearn(m)
	case MsgLearnReply:
		c.onLearnReply(m)
	case MsgTimeoutNow:
		if c.role != master && m.Ballot == c.soft.Ballot {
			c.campaign(m.Ballot)
		}
	}
	if c.confChanged {
		c.onConfChange()
	}
}

// --- driver interface ---

// NextTick returns the earliest tick (a value of Now) at which Tick may do
// anything besides counting, were no message, proposal or control to
// arrive meanwhile: the ticks before it can be skipped and handed over
// later, all at once, with no difference in what the Core does. A driver
// need not wake on every tick; it wakes at NextTick, and before it steps
// anything else into the Core it delivers every tick that has passed, so
// that Now is current whenever the Core decides (its leases and timeouts
// are all compared with Now). It must ask again after every Step,
// Propose, control call and Advance, since each may bring it forward.
//
// The answer errs early, never late: waking at a tick where nothing is
// due costs only the wake-up. The simulator checks that no skipped tick
// would have produced work.
func (c *Core) NextTick() uint64 {
	next := c.now + 1
	earliest := uint64(math.MaxUint64)
	at := func(t uint64) {
		earliest = min(earliest, max(t, next))
	}
	if c.awaitSnap {
		at(c.awaitSnapAt + uint64(4*c.cfg.LeaseTicks) + 1)
	}
	switch c.role {
	case follower:
		if c.needSnap {
			if !c.awaitSnap {
				at(c.learnSent + uint64(c.cfg.LeaseTicks))
			}
		} else if c.mem.Contains(c.cfg.ID) {
			at(c.electAt)
		}
		if c.learnPending {
			at(c.learnSent + uint64(c.cfg.RetransmitTicks))
		}
	case candidate:
		at(c.electAt)
	case master:
		at(c.leaseExpiry)
		hb := uint64(c.cfg.HeartbeatTicks)
		at(c.lastHB + hb)
		at(next + (hb-(next+c.cfg.TickPhase)%hb)%hb)
		for inst := c.hs.Committed + 1; inst < c.nextInst; inst++ {
			if f, ok := c.inflight[inst]; ok && !f.done {
				at(f.sent + uint64(c.cfg.RetransmitTicks))
			}
		}
		if p := c.preferred; p != 0 && p != c.cfg.ID && c.mem.Contains(p) {
			// maybeHandOff: the wait since election passes by itself; the
			// rest changes only with a heartbeat acknowledgement, after
			// which the driver asks again.
			if since := c.masterSince + uint64(2*c.cfg.LeaseTicks); since > next {
				at(since)
			} else if t, ok := c.ackTick[p]; ok && c.caughtUp[p] && next-t <= uint64(2*c.cfg.HeartbeatTicks) {
				at(next)
			}
		}
	}
	return earliest
}

// SnapshotInstalled tells the Core that the state machine now reflects
// every instance up to applied, installed from a snapshot, and that the log
// below applied+1 is gone. m is the member set the snapshot recorded as in
// force after applied; the zero Membership (a snapshot taken before member
// sets were recorded) keeps the set the Core has.
func (c *Core) SnapshotInstalled(applied uint64, m Membership) {
	c.awaitSnap = false
	if applied >= instanceLimit || applied < c.logStart-1 || (applied <= c.applied && !c.needSnap) {
		return // too old to cover what this replica truncated
	}
	c.needSnap = false
	for i := range c.entries {
		if i <= applied {
			delete(c.entries, i)
		}
	}
	for i, p := range c.mine {
		if i <= applied {
			c.failed = append(c.failed, Failed{Tags: p.tags, Err: ErrNotChosen})
			delete(c.mine, i)
		}
	}
	c.applied = applied
	c.logStart = max(c.logStart, applied+1)
	c.last = max(c.last, applied)
	if !m.IsZero() {
		// The snapshot's set, with every change chosen above it that
		// this replica already knows of.
		old := c.mem
		c.mem = m.Clone()
		c.foldRange(applied+1, c.hs.Committed)
		c.quorum = c.mem.Quorum()
		if !slices.Equal(old.Members, c.mem.Members) {
			c.confChanged = true
		}
		c.memGen++
	}
	c.setCommitted(applied)
	c.learnAsked = c.learnAsked[:0]
	c.learnPending = true
	c.learnSent = 0
	if c.confChanged {
		c.onConfChange()
	}
}

// Compacted tells the Core that the log below start was deleted. start
// must not exceed AppliedIndex()+1.
func (c *Core) Compacted(start uint64) {
	if start > c.logStart && start <= c.applied+1 {
		c.logStart = start
	}
}

// Flush fails every queued command with err, and every command already
// proposed in an instance with ErrOutcomeUnknown wrapping err (another
// master may still choose it); the driver calls it when it stops.
func (c *Core) Flush(err error) {
	c.flushQueue(err)
	if len(c.mine) == 0 {
		return
	}
	inDoubt := fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	for i, p := range c.mine {
		c.failed = append(c.failed, Failed{Tags: p.tags, Err: inDoubt})
		delete(c.mine, i)
	}
}
