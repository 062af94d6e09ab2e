package paxos

import (
	"container/heap"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var (
	simSeed  = flag.Int64("seed", -1, "replay one simulation seed")
	simSeeds = flag.Int("seeds", 0, "number of simulation seeds (default 2000, 150 under -race or -short)")
	simTrace = flag.Bool("simtrace", false, "print every simulated event")
	// simUnsyncedApply models applies and the committed mark as the host
	// commits them, without a sync of their own (durable only with a
	// later synced write). Off, each is durable at a sync event of its own.
	simUnsyncedApply = flag.Bool("unsyncedapply", false, "applies and the committed mark become durable only with a later synced write, as in the host")
)

// The simulator drives N Cores through a network that drops, duplicates,
// reorders and delays messages, partitions and heals, and crashes and
// restarts replicas. Each replica's Ready is carried out in the production
// runtime's order: writes are issued at once; a Ready that needs a sync
// (NeedsSync), applies or moves the committed mark becomes durable at a
// later sync event, with every write issued before it (in order, as in one
// write-ahead log), and one of write-only entries alone (quorum sync) only
// with a later synced write (-unsyncedapply treats applies and the
// committed mark so too, as the host commits them); reads of the log see
// every issued write, as the store's do; Messages leave at once;
// MessagesAfterSync leave,
// and the replica's own votes are stepped back into it, only at the sync
// event of their Ready, once every synced write before them is durable
// (checkVouched checks that what they vouch for is on disk). A crash keeps
// a random prefix of the issued writes and loses the rest with their
// after-sync messages. Time is in units of 1/1000 of a nominal tick; each replica
// ticks at its own rate within MaxDrift.

const unit = 1000

type simEvent struct {
	at   int64
	seq  uint64
	kind int // evTick, evMsg, evSnap, evSync
	node NodeID
	inc  int    // incarnation of the node the tick or sync is for
	upto uint64 // evSync: the last write it makes durable
	msg  Message
	snap *simSnap
}

const (
	evTick = iota
	evMsg
	evSnap
	evSync
)

type simSnap struct {
	applied uint64
	sm      []string
	mem     Membership
}

type eventQueue []*simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simDisk is what survives a crash.
type simDisk struct {
	hard     HardState
	log      map[uint64]Entry
	logStart uint64
	// sm[i-1] is the value applied at instance i; applied = len(sm).
	sm []string
	// mem is the member set in force after the applied instance, as the
	// runtime records it with the state machine; needSnap says the
	// state machine is empty and must come from a snapshot (a node that
	// joins, or an install cut short).
	mem      Membership
	needSnap bool
}

func (d *simDisk) Entries(from, to uint64, maxBytes int) ([]Entry, error) {
	return boundedEntries(from, to, maxBytes, func(i uint64) (Entry, bool) {
		e, ok := d.log[i]
		return e, ok
	}), nil
}

// boundedEntries reads instances from..to with get, stopping at the first
// missing one and before maxBytes of values (at least one entry).
func boundedEntries(from, to uint64, maxBytes int, get func(uint64) (Entry, bool)) []Entry {
	var out []Entry
	size := 0
	for i := from; i <= to; i++ {
		e, ok := get(i)
		if !ok {
			break
		}
		if len(out) > 0 && size+e.Value.Size() > maxBytes {
			break
		}
		out = append(out, e)
		size += e.Value.Size()
	}
	return out
}

// simSeedCount is how many seeds a simulation test runs: -seeds, else
// 2000, or 150 under -race or -short.
func simSeedCount() int {
	if n := *simSeeds; n != 0 {
		return n
	}
	if raceEnabled || testing.Short() {
		return 150
	}
	return 2000
}

// Entries reads nd's log as the runtime's store does: every write issued,
// durable or not (a Pebble read sees a batch once it is applied, before
// its fsync), the later write of an instance over the earlier.
func (nd *simNode) Entries(from, to uint64, maxBytes int) ([]Entry, error) {
	return boundedEntries(from, to, maxBytes, func(i uint64) (Entry, bool) {
		e, ok := nd.disk.log[i]
		for _, w := range nd.pending {
			if w.durable || i < nd.disk.logStart {
				continue
			}
			for _, pe := range w.entries {
				if pe.Instance == i {
					e, ok = pe, true
				}
			}
		}
		return e, ok
	}), nil
}

type simNode struct {
	id   NodeID
	core *Core
	up   bool
	// dirty: the core may have changed since checkCores last checked it.
	// Every call into a core is followed by process (or marks the node
	// itself), which sets it.
	dirty  bool
	inc    int
	period int64
	disk   simDisk
	peers  []NodeID          // Config.Peers: the set it was created with
	tags   map[uint64]string // proposal tag -> value key, for this incarnation
	mem    Membership        // the set after the applied instance in memory
	// sm is the applied state in memory (ahead of disk.sm by the pending
	// writes); pending are the writes issued and not yet synced, in order.
	sm      []string
	pending []*simWrite
	wseq    uint64
	// wrote holds the instances this incarnation wrote write-only, by
	// ballot (quorum sync), so that its votes on them can be counted;
	// loseAll makes its next crash keep none of its pending writes.
	wrote   map[uint64]Ballot
	loseAll bool
}

// simWrite is what one Ready asked to persist, issued but maybe not yet
// durable, and the messages that wait for it. A write that asks for no
// sync (sync false: write-only entries, or votes alone) becomes durable
// only with a later synced write, or in a crash's kept prefix; its votes
// leave once every earlier synced write is durable, as in the runtime.
type simWrite struct {
	seq     uint64
	durable bool
	sync    bool
	sent    bool // its after-sync messages left (or it had none)
	commit  bool // Committed changed
	hard    HardState
	entries []Entry
	smFrom  int      // applied instance before sm
	sm      []string // values applied by the Ready
	mem     Membership
	after   []Message
}

// holds reports whether w writes anything: a write that carries votes
// alone holds nothing that a later write does not.
func (w *simWrite) holds() bool {
	return w.sync || w.commit || len(w.entries) > 0 || len(w.sm) > 0
}

type sim struct {
	t       *testing.T
	seed    int64
	rng     *rand.Rand
	cfg     Config
	nodes   []*simNode
	q       eventQueue
	now     int64
	seq     uint64
	cut     map[[2]NodeID]bool
	drop    float64
	dup     float64
	longP   float64
	failed  error
	crashy  bool
	nextCmd int
	// unsyncedApply: applies and the committed mark are durable only
	// with a later synced write (-unsyncedapply).
	unsyncedApply bool

	// checker state
	votes      map[uint64]map[Ballot]*vote
	chosen     map[uint64]string
	appliedVal map[uint64]string
	proposed   map[string]bool
	failedTags map[uint64]bool
	restartAt  map[NodeID]int64
	events     int
	idleTicks  int // ticks NextTick said could be skipped

	// quorum sync: write-only Readys carried out, their writes a crash
	// lost, and votes sent on instances the voter held write-only.
	writeOnlyReadys, lostWriteOnly, writeOnlyVotes int

	// membership: memAt[h] is the set in force after instance h of the
	// chain of applied values (appliedVal is complete up to chainHi);
	// changes counts the changes in the chain, so plan[changes] is the
	// next of the changes the run makes (positive: add a new node,
	// negative: remove a member); addID is the node created for the
	// latest addition, nextChange when the next is proposed.
	memAt      []Membership
	chainHi    uint64
	changes    int
	plan       []int
	addID      NodeID
	nextChange int64
}

type vote struct {
	val   string
	nodes []NodeID
}

func valKey(v Value) string {
	if v.Change != nil {
		return fmt.Sprintf("change/%s/%d/%s", v.Origin, v.Seq, v.Change)
	}
	// Built by hand: the simulation keys every applied value, and fmt
	// was a fifth of its CPU. The same text as "%s/%d/%q" of Origin,
	// Seq and Cmds (a "noop/" prefix and no commands for a no-op).
	b := make([]byte, 0, 48)
	if len(v.Cmds) == 0 {
		b = append(b, "noop/"...)
	}
	b = strconv.AppendUint(b, v.Origin.Round, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(v.Origin.Node), 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, v.Seq, 10)
	if len(v.Cmds) == 0 {
		return string(b)
	}
	b = append(b, "/["...)
	for i, c := range v.Cmds {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendQuote(b, string(c))
	}
	return string(append(b, ']'))
}

// newSim makes a simulation of n replicas; opts adjust the group's
// Config before any replica starts.
func newSim(t *testing.T, seed int64, n int, opts ...func(*Config)) *sim {
	s := &sim{
		t:          t,
		seed:       seed,
		rng:        rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		cut:        make(map[[2]NodeID]bool),
		votes:      make(map[uint64]map[Ballot]*vote),
		chosen:     make(map[uint64]string),
		appliedVal: make(map[uint64]string),
		proposed:   make(map[string]bool),
		failedTags: make(map[uint64]bool),
		restartAt:  make(map[NodeID]int64),

		unsyncedApply: *simUnsyncedApply,
	}
	peers := make([]NodeID, n)
	for i := range peers {
		peers[i] = NodeID(i + 1)
	}
	s.cfg = Config{
		Group:           7,
		Peers:           peers,
		HeartbeatTicks:  3,
		LeaseTicks:      20,
		MaxDrift:        0.05,
		RetransmitTicks: 4,
		MaxInflight:     1 + s.rng.IntN(4), // 1–4: the server's default instance_window is 4
		MaxBatchCmds:    1 + s.rng.IntN(8),
		MaxQueue:        64,
		MaxMsgBytes:     512 + s.rng.IntN(4096),
	}
	for _, o := range opts {
		o(&s.cfg)
	}
	s.memAt = []Membership{{Members: peers}}
	for _, id := range peers {
		s.addNode(id, peers, Membership{}, false)
	}
	return s
}

// addNode creates and starts node id with a fresh disk.
func (s *sim) addNode(id NodeID, peers []NodeID, mem Membership, needSnap bool) *simNode {
	// Rates within ±4%, inside the configured 5% bound.
	r := (s.rng.Float64()*2 - 1) * 0.04
	nd := &simNode{id: id, peers: peers, period: int64(float64(unit) / (1 + r)),
		disk: simDisk{log: make(map[uint64]Entry), logStart: 1, mem: mem, needSnap: needSnap}}
	s.nodes = append(s.nodes, nd)
	s.start(nd)
	return nd
}

func (s *sim) node(id NodeID) *simNode { return s.nodes[id-1] }

func (s *sim) fail(format string, args ...any) {
	if s.failed == nil {
		s.failed = fmt.Errorf("seed %d at t=%d: %s", s.seed, s.now, fmt.Sprintf(format, args...))
	}
}

func (s *sim) push(e *simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *sim) start(nd *simNode) {
	cfg := s.cfg
	cfg.ID = nd.id
	cfg.Peers = nd.peers
	cfg.Seed = s.rng.Uint64()
	// Replicas heartbeat in different phases, as on hosts that started at
	// different times (no draw from rng: seeds keep replaying as before).
	cfg.TickPhase = uint64(s.seed+int64(nd.id)) % 5
	st := InitState{Hard: nd.disk.hard, LogStart: nd.disk.logStart, Applied: uint64(len(nd.disk.sm)),
		Membership: nd.disk.mem, NeedSnapshot: nd.disk.needSnap}
	for i := st.Applied + 1; ; i++ {
		e, ok := nd.disk.log[i]
		if !ok {
			// Entries above a gap are still loaded: collect them all.
			var rest []uint64
			for k := range nd.disk.log {
				if k > i {
					rest = append(rest, k)
				}
			}
			slices.Sort(rest)
			for _, k := range rest {
				st.Entries = append(st.Entries, nd.disk.log[k])
			}
			break
		}
		st.Entries = append(st.Entries, e)
	}
	c, err := NewCore(cfg, st, nd)
	if err != nil {
		s.fail("NewCore: %v", err)
		return
	}
	nd.core = c
	nd.up = true
	nd.dirty = true
	nd.inc++
	nd.tags = make(map[uint64]string)
	nd.sm = slices.Clone(nd.disk.sm)
	nd.mem = nd.disk.mem
	if nd.mem.IsZero() {
		nd.mem = Membership{Members: nd.peers}
	}
	nd.pending = nil
	nd.wrote = nil
	if s.rng.IntN(3) == 0 {
		c.SetPreferred(NodeID(1 + s.rng.IntN(len(s.nodes))))
	}
	s.push(&simEvent{at: s.now + s.rng.Int64N(nd.period) + 1, kind: evTick, node: nd.id, inc: nd.inc})
}

func (s *sim) crash(nd *simNode) {
	if !nd.up {
		return
	}
	nd.up = false
	nd.core = nil
	// Writes reach the disk in the order they were issued: a crash keeps
	// a prefix of the unsynced ones, and their after-sync messages are
	// never sent.
	keep := s.rng.IntN(len(nd.pending) + 1)
	if nd.loseAll {
		keep, nd.loseAll = 0, false
	}
	for _, w := range nd.pending[:keep] {
		s.persist(nd, w)
	}
	for _, w := range nd.pending[keep:] {
		if !w.durable && !w.sync && len(w.entries) > 0 {
			s.lostWriteOnly++
		}
	}
	nd.pending = nil
	if s.rng.IntN(2) == 0 {
		// The lazily written committed mark may fall back too, but never
		// below what is applied.
		nd.disk.hard.Committed = max(uint64(len(nd.disk.sm)), nd.disk.logStart-1)
	}
}

// persist makes w durable on nd's disk.
func (s *sim) persist(nd *simNode, w *simWrite) {
	if w.durable {
		return
	}
	w.durable = true
	if w.hard.Promised.Less(nd.disk.hard.Promised) {
		s.fail("node %d promised went back from %s to %s", nd.id, nd.disk.hard.Promised, w.hard.Promised)
	}
	nd.disk.hard.Promised = w.hard.Promised
	nd.disk.hard.Committed = max(nd.disk.hard.Committed, w.hard.Committed)
	for _, e := range w.entries {
		if e.Instance < nd.disk.logStart || e.Instance <= uint64(len(nd.disk.sm)) {
			continue
		}
		nd.disk.log[e.Instance] = e
		s.recordVote(nd.id, e)
	}
	if len(w.sm) > 0 {
		if w.smFrom != len(nd.disk.sm) {
			s.fail("node %d: applied writes from %d reach a disk at %d", nd.id, w.smFrom, len(nd.disk.sm))
			return
		}
		nd.disk.sm = append(nd.disk.sm, w.sm...)
		nd.disk.mem = w.mem
	}
}

// flush makes every issued write durable at once, as the runtime's
// synchronous commits (log truncation, snapshot install) do; the
// after-sync messages still leave at their own sync event.
func (s *sim) flush(nd *simNode) {
	for _, w := range nd.pending {
		s.persist(nd, w)
	}
}

// synced handles the sync event of nd's writes up to seq: the last synced
// write among them is durable with every write before it, and the
// after-sync messages of them all leave (to nd itself: stepped in).
func (s *sim) synced(nd *simNode, upto uint64) {
	last := -1
	for i, w := range nd.pending {
		if w.seq > upto {
			break
		}
		if w.sync {
			last = i
		}
	}
	for _, w := range nd.pending[:last+1] {
		s.persist(nd, w)
	}
	var after []Message
	var committed []uint64 // the Committed of each message's Ready
	for _, w := range nd.pending {
		if w.seq > upto {
			break
		}
		if !w.sent {
			w.sent = true
			after = append(after, w.after...)
			for range w.after {
				committed = append(committed, w.hard.Committed)
			}
		}
	}
	// A write is done once durable and its messages left; one that
	// carries only votes writes nothing a later write does not.
	n := 0
	for ; n < len(nd.pending); n++ {
		w := nd.pending[n]
		if !w.sent || !w.durable && w.holds() {
			break
		}
	}
	nd.pending = nd.pending[n:]
	if len(after) > 0 && s.crashy && s.rng.IntN(400) == 0 {
		s.trace("node %d crashes after syncing, before sending", nd.id)
		s.crash(nd)
		return
	}
	for i, m := range after {
		s.checkVouched(nd, m, committed[i])
	}
	for _, m := range after {
		if m.To == nd.id {
			nd.core.Step(m)
		} else {
			s.sendMsg(m)
		}
	}
}

func (s *sim) trace(format string, args ...any) {
	if *simTrace {
		s.t.Logf("%8d "+format, append([]any{s.now}, args...)...)
	}
}

// process carries out a node's Ready in the order the production runtime
// does: issue the writes (durable at a later sync event), send Messages,
// apply, Advance; MessagesAfterSync wait for the sync.
func (s *sim) process(nd *simNode) {
	nd.dirty = true
	for nd.up && nd.core.HasReady() {
		// What the Core holds for this Ready must satisfy its invariants
		// too (C12 is about the output before it leaves).
		if err := nd.core.checkInvariants(); err != nil {
			s.fail("invariant before Ready: %v", err)
		}
		rd := nd.core.Ready()
		// Ready's slices are the Core's again after Advance: keep copies.
		w := &simWrite{hard: rd.HardState, entries: slices.Clone(rd.Entries), after: slices.Clone(rd.MessagesAfterSync), smFrom: len(nd.sm)}
		if rd.WriteOnly {
			s.writeOnly(nd, rd.Entries)
		}
		for _, m := range rd.Messages {
			s.sendMsg(m)
		}
		for _, a := range rd.Apply {
			s.apply(nd, a, w)
		}
		for _, f := range rd.Failed {
			for _, tag := range f.Tags {
				s.failedTags[tag] = true
			}
		}
		for _, p := range rd.SendSnapshot {
			snap := &simSnap{applied: uint64(len(nd.sm)), sm: slices.Clone(nd.sm), mem: nd.mem}
			s.deliverLater(nd.id, p, &simEvent{kind: evSnap, node: p, snap: snap})
		}
		if rd.SoftChanged {
			s.trace("node %d soft %+v", nd.id, rd.Soft)
		}
		nd.core.Advance(rd)
		w.sync = rd.NeedsSync() || !s.unsyncedApply && (rd.CommittedChanged || len(w.sm) > 0)
		w.commit = rd.CommittedChanged
		w.sent = len(w.after) == 0
		if !w.sync && w.sent && w.holds() {
			// Write-only entries, applies or the committed mark, and
			// nothing waits for them: issued, durable with a later sync
			// or lost in a crash.
			nd.wseq++
			w.seq = nd.wseq
			nd.pending = append(nd.pending, w)
		} else if w.sync || !w.sent {
			nd.wseq++
			w.seq = nd.wseq
			nd.pending = append(nd.pending, w)
			delay := 1 + s.rng.Int64N(unit/4)
			if s.rng.IntN(20) == 0 {
				delay += s.rng.Int64N(3 * unit) // a slow fsync
			}
			s.push(&simEvent{at: s.now + delay, kind: evSync, node: nd.id, inc: nd.inc, upto: w.seq})
		}
		s.maybeTruncate(nd)
	}
}

func (s *sim) apply(nd *simNode, a Applied, w *simWrite) {
	if a.Instance != uint64(len(nd.sm))+1 {
		s.fail("node %d applied %d after %d", nd.id, a.Instance, len(nd.sm))
		return
	}
	k := valKey(a.Value)
	s.checkChosen(a.Instance)
	if c, ok := s.chosen[a.Instance]; !ok || c != k {
		s.fail("node %d applied %q at %d, chosen %q (%v)", nd.id, k, a.Instance, c, ok)
	}
	if prev, ok := s.appliedVal[a.Instance]; ok && prev != k {
		s.fail("node %d applied %q at %d, another applied %q", nd.id, k, a.Instance, prev)
	}
	s.appliedVal[a.Instance] = k
	nd.sm = append(nd.sm, k)
	w.sm = append(w.sm, k)
	if a.Value.Change != nil {
		nd.mem = nd.mem.Apply(*a.Value.Change)
	}
	w.mem = nd.mem
	s.extendChain(a.Instance, a.Value)
	if a.Value.Change != nil {
		for _, tag := range a.Tags {
			if want := nd.tags[tag]; want != "change"+a.Value.Change.String() {
				s.fail("node %d: tag %d came back with change %s, proposed %q", nd.id, tag, a.Value.Change, want)
			}
		}
		return
	}
	for i, tag := range a.Tags {
		if want := nd.tags[tag]; want != string(a.Value.Cmds[i]) {
			s.fail("node %d: tag %d came back with %q, proposed %q", nd.id, tag, a.Value.Cmds[i], want)
		}
	}
}

func (s *sim) maybeTruncate(nd *simNode) {
	applied := uint64(len(nd.sm))
	if applied < nd.disk.logStart+12 || s.rng.IntN(8) != 0 {
		return
	}
	start := applied - uint64(s.rng.IntN(4))
	// The runtime makes the applied state durable before it deletes.
	s.flush(nd)
	for i := range nd.disk.log {
		if i < start {
			delete(nd.disk.log, i)
		}
	}
	nd.disk.logStart = start
	nd.disk.hard.Committed = max(nd.disk.hard.Committed, applied)
	nd.core.Compacted(start)
}

func (s *sim) recordVote(id NodeID, e Entry) {
	k := valKey(e.Value)
	byBallot := s.votes[e.Instance]
	if byBallot == nil {
		byBallot = make(map[Ballot]*vote)
		s.votes[e.Instance] = byBallot
	}
	v := byBallot[e.Ballot]
	if v == nil {
		v = &vote{val: k}
		byBallot[e.Ballot] = v
	}
	if v.val != k {
		s.fail("instance %d ballot %s carries two values %q and %q", e.Instance, e.Ballot, v.val, k)
	}
	if !slices.Contains(v.nodes, id) {
		v.nodes = append(v.nodes, id)
	}
	s.checkChosen(e.Instance)
}

// checkChosen asserts I3 at instance i once the set in force for it is
// known (every instance below it is in the chain): at most one value has
// the votes of a majority of that set. A value is chosen only by a
// majority of the set in force for its instance; votes of non-members
// count for nothing.
func (s *sim) checkChosen(i uint64) {
	if i == 0 || i-1 > s.chainHi {
		return // checked when the chain reaches it (extendChain)
	}
	mem := s.memAt[i-1]
	for b, v := range s.votes[i] {
		n := 0
		for _, id := range v.nodes {
			if mem.Contains(id) {
				n++
			}
		}
		if n < mem.Quorum() {
			continue
		}
		if c, ok := s.chosen[i]; ok && c != v.val {
			s.fail("instance %d chose %q and %q (ballot %s, set %v)", i, c, v.val, b, mem)
		}
		s.chosen[i] = v.val
	}
}

// extendChain records that instance i applied v somewhere, and extends the
// chain of sets while it is complete.
func (s *sim) extendChain(i uint64, v Value) {
	if i != s.chainHi+1 {
		return // applied again by another replica, or checked already
	}
	mem := s.memAt[s.chainHi]
	if v.Change != nil {
		mem = mem.Apply(*v.Change)
		s.changes++
		s.trace("chain: change %s at %d, set %v", v.Change, i, mem)
	}
	s.memAt = append(s.memAt, mem)
	s.chainHi = i
	// The instance above, whose set is now known, is checked at once.
	s.checkChosen(i + 1)
}

// reconfigure asks a serving master for the plan's next change, once the
// chain reflects every change before it.
func (s *sim) reconfigure() {
	if s.changes >= len(s.plan) {
		return
	}
	cur := s.memAt[s.chainHi]
	for _, nd := range s.nodes {
		if !nd.up || !nd.core.Status().Serving {
			continue
		}
		ms := nd.core.Membership()
		if ms.Pending != nil || !slices.Equal(ms.Current.Members, cur.Members) {
			return
		}
		var ch MemberChange
		if s.plan[s.changes] > 0 {
			if s.addID == 0 || cur.Contains(s.addID) {
				// A new node, under an id never used: it starts empty and
				// gets the state machine by snapshot.
				id := NodeID(len(s.nodes) + 1)
				joined := cur.Apply(MemberChange{Add: id})
				s.trace("create node %d to join %v", id, joined)
				s.addNode(id, joined.Members, joined, true)
				s.addID = id
			}
			ch.Add = s.addID
		} else {
			ch.Remove = cur.Members[s.rng.IntN(len(cur.Members))]
		}
		s.nextCmd++
		tag := uint64(s.nextCmd)
		err := nd.core.ProposeMembership(ch, tag)
		s.trace("propose change %s on %d: %v", ch, nd.id, err)
		if err == nil {
			nd.tags[tag] = "change" + ch.String()
		}
		s.process(nd)
		return
	}
}

func (s *sim) deliverLater(from, to NodeID, ev *simEvent) {
	if s.cut[[2]NodeID{from, to}] || s.rng.Float64() < s.drop {
		return
	}
	delay := 50 + s.rng.Int64N(2*unit)
	if s.rng.Float64() < s.longP {
		delay += s.rng.Int64N(30 * unit)
	}
	ev.at = s.now + delay
	s.push(ev)
	if s.rng.Float64() < s.dup {
		cp := *ev
		cp.at = s.now + 50 + s.rng.Int64N(3*unit)
		s.push(&cp)
	}
}

func (s *sim) sendMsg(m Message) {
	s.deliverLater(m.From, m.To, &simEvent{kind: evMsg, node: m.To, msg: m})
}

// checkMasters asserts invariant I5 (docs/design.md): at most one node
// holds an unexpired master lease.
func (s *sim) checkMasters() {
	var ms []NodeID
	for _, nd := range s.nodes {
		if nd.up && nd.core.IsMaster() {
			ms = append(ms, nd.id)
		}
	}
	if len(ms) > 1 {
		s.fail("two masters with live leases: %v", ms)
	}
}

func (s *sim) step() bool {
	if len(s.q) == 0 {
		return false
	}
	ev := heap.Pop(&s.q).(*simEvent)
	s.now = ev.at
	s.events++
	nd := s.node(ev.node)
	switch ev.kind {
	case evTick:
		if !nd.up || ev.inc != nd.inc {
			return true
		}
		// A driver may skip the ticks before NextTick: check that each
		// one it would have skipped does nothing.
		idle := nd.core.Now()+1 < nd.core.NextTick() && !nd.core.HasReady()
		nd.core.Tick()
		if idle && nd.core.HasReady() {
			s.fail("node %d: tick %d, before NextTick, produced work", nd.id, nd.core.Now())
		}
		if idle {
			s.idleTicks++
		}
		s.push(&simEvent{at: s.now + nd.period, kind: evTick, node: nd.id, inc: nd.inc})
	case evMsg:
		if !nd.up {
			return true
		}
		s.trace("deliver %s %d->%d b=%s i=%d c=%d rej=%v n=%d", ev.msg.Type, ev.msg.From, ev.msg.To, ev.msg.Ballot, ev.msg.Instance, ev.msg.Committed, ev.msg.Reject, len(ev.msg.Entries))
		nd.core.Step(ev.msg)
	case evSync:
		if !nd.up || ev.inc != nd.inc {
			return true
		}
		s.synced(nd, ev.upto)
	case evSnap:
		if !nd.up || ev.snap.applied <= uint64(len(nd.sm)) {
			return true
		}
		// Install: earlier writes first (the install commits after them),
		// the state machine, then the log below it goes.
		s.flush(nd)
		nd.disk.sm = slices.Clone(ev.snap.sm)
		nd.sm = slices.Clone(ev.snap.sm)
		nd.disk.mem, nd.mem = ev.snap.mem, ev.snap.mem
		nd.disk.needSnap = false
		for i := range nd.disk.log {
			if i <= ev.snap.applied {
				delete(nd.disk.log, i)
			}
		}
		nd.disk.logStart = ev.snap.applied + 1
		nd.disk.hard.Committed = max(nd.disk.hard.Committed, ev.snap.applied)
		for i, k := range nd.disk.sm {
			if prev, ok := s.appliedVal[uint64(i+1)]; ok && prev != k {
				s.fail("snapshot on node %d disagrees at %d", nd.id, i+1)
			}
		}
		nd.core.SnapshotInstalled(ev.snap.applied, ev.snap.mem)
	}
	s.process(nd)
	s.checkMasters()
	s.checkCores()
	return true
}

// checkCores runs the own invariants (Core's C1–C17) of every live
// replica that may have changed since it last ran them: a core changes
// only through calls the simulator makes, each of which marks its node.
func (s *sim) checkCores() {
	for _, nd := range s.nodes {
		if nd.up && nd.dirty {
			nd.dirty = false
			if err := nd.core.checkInvariants(); err != nil {
				s.fail("invariant: %v", err)
			}
		}
	}
}

func (s *sim) propose() {
	for _, nd := range s.nodes {
		if nd.up && nd.core.Status().Serving {
			s.nextCmd++
			cmd := fmt.Sprintf("c%d", s.nextCmd)
			tag := uint64(s.nextCmd)
			if err := nd.core.Propose([]byte(cmd), tag); err == nil {
				nd.tags[tag] = cmd
				s.proposed[cmd] = true
			}
			s.process(nd)
			return
		}
	}
}

// chaos runs the faulty phase for the given number of nominal ticks.
func (s *sim) chaos(ticks int) {
	end := s.now + int64(ticks)*unit
	s.crashy = true
	s.drop = s.rng.Float64() * 0.2
	s.dup = s.rng.Float64() * 0.1
	s.longP = s.rng.Float64() * 0.05
	nextFault := s.now + s.rng.Int64N(40*unit)
	nextProp := s.now
	for s.failed == nil && s.now < end {
		if s.now >= nextFault {
			s.fault()
			nextFault = s.now + s.rng.Int64N(20*unit)
		}
		s.restarts()
		if s.now >= s.nextChange {
			s.reconfigure()
			s.nextChange = s.now + s.rng.Int64N(60*unit)
		}
		if len(s.q) == 0 {
			s.now += unit // everyone is down: let time pass until a restart
			continue
		}
		if s.now >= nextProp {
			for range 1 + s.rng.IntN(3) {
				s.propose()
			}
			nextProp = s.now + s.rng.Int64N(unit)
		}
		if !s.step() {
			break
		}
	}
}

func (s *sim) fault() {
	n := len(s.nodes)
	switch s.rng.IntN(8) {
	case 0, 1:
		nd := s.nodes[s.rng.IntN(n)]
		if nd.up {
			s.trace("crash %d", nd.id)
			s.crash(nd)
			s.restartAt[nd.id] = s.now + 1 + s.rng.Int64N(60*unit)
		}
	case 2:
		a, b := NodeID(1+s.rng.IntN(n)), NodeID(1+s.rng.IntN(n))
		if a != b {
			s.trace("cut %d-%d", a, b)
			s.cut[[2]NodeID{a, b}] = true
			s.cut[[2]NodeID{b, a}] = true
		}
	case 3:
		// Isolate one node completely.
		a := NodeID(1 + s.rng.IntN(n))
		s.trace("isolate %d", a)
		for _, nd := range s.nodes {
			if nd.id != a {
				s.cut[[2]NodeID{a, nd.id}] = true
				s.cut[[2]NodeID{nd.id, a}] = true
			}
		}
	case 4:
		s.trace("heal network")
		clear(s.cut)
	case 5:
		// A rogue or impatient timer: campaign now, whatever the lease.
		nd := s.nodes[s.rng.IntN(n)]
		if nd.up {
			s.trace("campaign %d", nd.id)
			nd.core.Campaign()
			s.process(nd)
		}
	case 6:
		// An explicit hand-off to a random node.
		nd := s.nodes[s.rng.IntN(n)]
		if nd.up {
			to := NodeID(1 + s.rng.IntN(n))
			s.trace("transfer %d -> %d", nd.id, to)
			nd.core.TransferTo(to)
			s.process(nd)
		}
	case 7:
		nd := s.nodes[s.rng.IntN(n)]
		if nd.up {
			p := NodeID(s.rng.IntN(n + 1))
			s.trace("prefer %d on %d", p, nd.id)
			nd.core.SetPreferred(p)
			nd.dirty = true
		}
	}
}

func (s *sim) restarts() {
	for _, nd := range s.nodes {
		if !nd.up && s.now >= s.restartAt[nd.id] {
			s.trace("restart %d", nd.id)
			s.start(nd)
			s.process(nd)
		}
	}
}

// heal ends every fault and checks liveness: a master serves and a
// proposal commits on every replica within a bounded number of ticks.
func (s *sim) heal() {
	clear(s.cut)
	s.drop, s.dup, s.longP, s.crashy = 0, 0, 0, false
	for _, nd := range s.nodes {
		if !nd.up {
			s.start(nd)
			s.process(nd)
		}
	}
	// Messages delayed from the chaos phase may still arrive; that is fine.
	bound := s.now + int64(40*s.cfg.LeaseTicks)*unit
	var cmd string
	var tag, target uint64
	for s.failed == nil && s.now < bound {
		if cmd != "" && target == 0 && s.failedTags[tag] {
			cmd = "" // dropped by a master that stepped down: propose again
		}
		if cmd == "" {
			for _, nd := range s.nodes {
				if nd.core.Status().Serving {
					s.nextCmd++
					cmd = fmt.Sprintf("live%d", s.nextCmd)
					err := nd.core.Propose([]byte(cmd), uint64(s.nextCmd))
					s.trace("heal: propose %s on %d: %v", cmd, nd.id, err)
					if err != nil {
						cmd = ""
						continue
					}
					tag = uint64(s.nextCmd)
					nd.tags[tag] = cmd
					s.process(nd)
					break
				}
			}
		} else if target == 0 {
			quoted := strconv.Quote(cmd)
			for i, k := range s.appliedVal {
				if k != "" && strings.Contains(k, quoted) {
					target = i
				}
			}
		} else {
			all := true
			for _, nd := range s.nodes {
				// Nodes removed from the group need not follow it.
				if !s.memAt[s.chainHi].Contains(nd.id) {
					continue
				}
				if uint64(len(nd.sm)) < target {
					all = false
				}
			}
			if all {
				return
			}
		}
		if !s.step() {
			break
		}
	}
	if s.failed == nil {
		st := make([]string, 0, len(s.nodes))
		for _, nd := range s.nodes {
			st = append(st, fmt.Sprintf("n%d{soft=%+v applied=%d committed=%d start=%d}", nd.id, nd.core.Status(), len(nd.sm), nd.core.Committed(), nd.disk.logStart))
		}
		s.fail("no progress after healing: cmd=%q target=%d %v", cmd, target, st)
	}
}

// containsCmd reports whether value key k (valKey) holds command cmd.
func containsCmd(k, cmd string) bool { return strings.Contains(k, strconv.Quote(cmd)) }

// simStats sums what the runs did, so that a test can check that the
// faults and changes it means to exercise happened.
type simStats struct {
	runs, changes, planned, joined int
}

func runSim(t *testing.T, seed int64) error {
	_, err := runSimStats(t, seed)
	return err
}

func runSimStats(t *testing.T, seed int64, opts ...func(*Config)) (*sim, error) {
	n := 3
	if seed%4 == 3 {
		n = 5
	}
	s := newSim(t, seed, n, opts...)
	// 3→4→5→4→3 and a replacement, or from 5 down to 3, up to 5 and a
	// replacement.
	s.plan = []int{+1, +1, -1, -1, -1, +1}
	if n == 5 {
		s.plan = []int{-1, -1, +1, +1, -1, +1}
	}
	s.nextChange = s.rng.Int64N(40 * unit)
	for _, nd := range s.nodes {
		s.process(nd)
	}
	s.chaos(300 + s.rng.IntN(300))
	if s.failed == nil {
		s.heal()
	}
	return s, s.failed
}

func TestSimulation(t *testing.T) {
	if *simSeed >= 0 {
		if err := runSim(t, *simSeed); err != nil {
			t.Fatal(err)
		}
		return
	}
	n := simSeedCount()
	var st simStats
	for seed := range int64(n) {
		s, err := runSimStats(t, seed)
		if err != nil {
			t.Fatalf("%v\nreplay: go test ./paxos -run TestSimulation -seed %d -simtrace", err, seed)
		}
		st.runs++
		st.changes += s.changes
		st.planned += len(s.plan)
		if s.changes == len(s.plan) {
			st.joined++
		}
	}
	t.Logf("%d runs: %d of %d planned membership changes chosen, %d runs completed their plan", st.runs, st.changes, st.planned, st.joined)
	// The faults leave room for changes: about 45% of the planned ones
	// are chosen. Far fewer means changes stopped happening, and the runs
	// no longer test them.
	if st.runs >= 100 && 4*st.changes < st.planned {
		t.Errorf("only %d of %d planned membership changes were chosen", st.changes, st.planned)
	}
}
