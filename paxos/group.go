package paxos

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/invariants"
)

// StateMachine is the replicated application a Group drives. Apply runs on
// every replica in log order, on the host's loop (one loop drives every
// group of a Host), so it must not block.
type StateMachine interface {
	// Apply applies the commands chosen for instance, in order. It records
	// its persistent changes in w, which the runtime commits atomically
	// with the applied instance, and sets results[i] to what the proposer
	// of cmds[i] gets back. It must be deterministic.
	Apply(instance uint64, cmds [][]byte, w Writer, results []any)
	// Load rebuilds in-memory state from the persistent keyspace; it runs
	// when the group opens and after a snapshot was installed.
	Load(r Reader, applied uint64) error
}

// Checkpointer is a StateMachine that keeps its state in memory and writes
// it to its keyspace only at checkpoints, with the log as the durable
// record in between: its Apply writes little or nothing, and the runtime
// records the applied instance only with a checkpoint, so a restart loads
// the last checkpoint and replays the log above it. The log is truncated
// only behind the last checkpoint, and snapshots are streamed from it.
type Checkpointer interface {
	StateMachine
	// Checkpoint writes into w every change since the previous checkpoint
	// (or Load), so that the keyspace reflects every applied instance. It
	// runs on the host's loop, after Apply.
	Checkpoint(w Writer)
	// CheckpointDue reports whether the state machine holds enough
	// unwritten changes to want a checkpoint before the runtime's
	// interval (GroupConfig.CheckpointEvery) is up.
	CheckpointDue() bool
}

// MasterObserver, when a StateMachine implements it, is told on the host's
// loop whenever the replica's view of mastership changes.
type MasterObserver interface {
	MasterChanged(s SoftState)
}

// Result is what a proposer gets back for one command.
type Result struct {
	// Instance is the instance that chose the command, and Index its
	// position in that instance's batch.
	Instance uint64
	Index    int
	// Value is what the state machine returned for the command.
	Value any
	// Err is non-nil when the command did not take effect (ErrNotMaster,
	// ErrOverloaded, ErrNotChosen, ErrStopped, ErrTooLarge).
	Err error
}

// Callback receives a command's Result. It runs on the host's loop, which
// drives every group of the Host (or, for errors found at once, on the submitter's) and must not block.
type Callback func(Result)

// GroupConfig configures one group on a Host.
type GroupConfig struct {
	Core Config
	// KeepLog is how many applied instances stay in the log behind the
	// applied instance before it is truncated (default 20000).
	KeepLog uint64
	// SnapshotChunk is the size of snapshot chunks (default 1 MiB).
	SnapshotChunk int
	// CheckpointEvery is how many applied instances a Checkpointer state
	// machine may run ahead of its last checkpoint (default 2048): the
	// most a restart replays from the log.
	CheckpointEvery uint64
}

// Group runs one Core with storage, transport and ticks.
type Group struct {
	id   GroupID
	host *Host
	core *Core
	sm   StateMachine
	ckpt Checkpointer // sm, when it checkpoints; nil when it writes through
	// checkpointed is the applied instance the keyspace reflects (the
	// last checkpoint's, or the last apply's without a Checkpointer).
	checkpointed uint64
	cfg          GroupConfig
	log          *slog.Logger
	store        *Store

	mu sync.Mutex
	// guarded by mu
	inbox   []Message
	props   []proposal
	closed  bool
	pending int // queued proposals not yet handed to the core

	status atomic.Pointer[statusSnapshot]

	// owned by the host's loop
	inboxSpare []Message
	propsSpare []proposal
	ctrlSpare  []func(*Core)
	tags       map[uint64]Callback
	nextTag    uint64
	results    []any
	install    *snapInstall
	ctrl       []func(*Core)
	streams    map[NodeID]chan uint64 // guarded by mu

	base      time.Time // when the core's tick 0 happened (a host tick)
	delivered uint64    // ticks handed to the core (the host's loop only)
	halted    bool      // stopped by a storage failure (host's loop only)
}

type proposal struct {
	cmd []byte
	cb  Callback
}

type statusSnapshot struct {
	soft SoftState
	// leaseUntil is when the master's lease ends on this node's monotonic
	// clock: tick k of the core happens at base + k*tick.
	leaseUntil time.Time
	committed  uint64
	applied    uint64
	logStart   uint64
}

type snapInstall struct {
	from    NodeID
	applied uint64
	next    uint64
	si      *SnapshotInstall
}

func (g *Group) signal() { g.host.signal() }

// ID returns the group's id.
func (g *Group) ID() GroupID { return g.id }

// Status returns the replica's latest view of mastership, without waiting
// for the host's loop. Serving is true only while the master's lease
// runs on the monotonic clock now: a replica whose process was paused
// stops serving the moment it resumes, before it even processes the ticks
// it missed.
func (g *Group) Status() SoftState {
	s := g.status.Load()
	soft := s.soft
	if soft.Serving && !time.Now().Before(s.leaseUntil) {
		soft.Serving = false
	}
	return soft
}

// Progress returns the committed and applied instances and the log start.
func (g *Group) Progress() (committed, applied, logStart uint64) {
	s := g.status.Load()
	return s.committed, s.applied, s.logStart
}

// Submit proposes cmd without waiting; cb gets the Result exactly once.
// Errors found at once (this replica is not serving, the queue is full)
// reach cb before Submit returns.
func (g *Group) Submit(cmd []byte, cb Callback) {
	if len(cmd)+64 > g.cfg.Core.MaxBatchBytes {
		cb(Result{Err: ErrTooLarge})
		return
	}
	if !g.Status().Serving {
		err := ErrNotMaster
		if serr := g.host.Err(); serr != nil {
			err = serr
		}
		cb(Result{Err: err})
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		err := ErrStopped
		if serr := g.host.Err(); serr != nil {
			err = serr
		}
		cb(Result{Err: err})
		return
	}
	if g.pending >= g.cfg.Core.MaxQueue {
		g.mu.Unlock()
		cb(Result{Err: ErrOverloaded})
		return
	}
	g.props = append(g.props, proposal{cmd: cmd, cb: cb})
	g.pending++
	first := len(g.props) == 1
	g.mu.Unlock()
	if first {
		g.signal()
	}
}

// Propose proposes cmd and waits until it is applied or failed, or ctx
// ends. When ctx ends first the outcome is unknown: the command may still
// be chosen.
func (g *Group) Propose(ctx context.Context, cmd []byte) (Result, error) {
	ch := make(chan Result, 1)
	g.Submit(cmd, func(r Result) { ch <- r })
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("paxos: propose: %w", ctx.Err())
	}
}

// TransferTo asks the group to hand mastership to node id, if this replica
// is master.
func (g *Group) TransferTo(id NodeID) { g.control(func(c *Core) { c.TransferTo(id) }) }

// SetPreferred sets the placement hint (0: no preference).
func (g *Group) SetPreferred(id NodeID) { g.control(func(c *Core) { c.SetPreferred(id) }) }

// Campaign makes this replica try to become master now.
func (g *Group) Campaign() { g.control(func(c *Core) { c.Campaign() }) }

func (g *Group) control(f func(*Core)) {
	g.mu.Lock()
	g.ctrl = append(g.ctrl, f)
	g.mu.Unlock()
	g.signal()
}

func (g *Group) deliver(msgs []Message) {
	g.mu.Lock()
	if len(g.inbox) > 1<<16 || g.closed {
		g.mu.Unlock()
		return // overloaded: Paxos tolerates loss
	}
	g.inbox = append(g.inbox, msgs...)
	first := len(g.inbox) == len(msgs)
	g.mu.Unlock()
	if first {
		g.signal()
	}
}

// dueTicks returns how many ticks are due by now and not yet handed to the
// core: tick k is due at base + k*Tick on the monotonic clock, so ticks
// that passed while the loop slept (the core said nothing was due) or
// while the process was paused all arrive at once, and a lease measured
// in ticks still ends on time.
func (g *Group) dueTicks(now time.Time) int {
	if now.Before(g.base) {
		return 0
	}
	due := uint64(now.Sub(g.base) / g.host.cfg.Tick)
	if due <= g.delivered {
		return 0
	}
	n := int(due - g.delivered)
	g.delivered = due
	return n
}

// wakeAt is when the core next wants a tick (Core.NextTick).
func (g *Group) wakeAt() time.Time {
	return g.base.Add(time.Duration(g.core.NextTick()) * g.host.cfg.Tick)
}

// drain moves what arrived for the group into its core: controls, the
// ticks due by now, messages (snapshot chunks go to the runtime) and
// proposals. The ticks go first among what the core decides on, so that
// its clock is current when it judges a message or proposal by its
// leases. Only the host's loop calls it.
func (g *Group) drain(now time.Time) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	inbox, props, ctrl := g.inbox, g.props, g.ctrl
	g.inbox, g.props, g.ctrl = g.inboxSpare[:0], g.propsSpare[:0], g.ctrlSpare[:0]
	g.pending -= len(props)
	g.mu.Unlock()

	for _, f := range ctrl {
		f(g.core)
	}
	for range g.dueTicks(now) {
		g.core.Tick()
	}
	for i := range inbox {
		m := &inbox[i]
		if m.Type == MsgSnapshot {
			g.onSnapshotMsg(m)
			continue
		}
		g.core.Step(*m)
	}
	for i := range props {
		p := &props[i]
		g.nextTag++
		if err := g.core.Propose(p.cmd, g.nextTag); err != nil {
			p.cb(Result{Err: err})
			continue
		}
		g.tags[g.nextTag] = p.cb
	}
	if invariants.Enabled {
		g.core.assertInvariants("drain")
	}
	clear(inbox)
	clear(props)
	clear(ctrl)
	g.inboxSpare, g.propsSpare, g.ctrlSpare = inbox, props, ctrl
}

// apply runs the chosen instances through the state machine, writing into
// b, and returns the results, one per command in order.
func (g *Group) apply(b *Batch, apply []Applied) []any {
	total := 0
	for _, a := range apply {
		total += len(a.Value.Cmds)
	}
	if cap(g.results) < total {
		g.results = make([]any, total)
	}
	res := g.results[:total]
	if len(apply) == 0 {
		return res
	}
	smw := b.SM(g.id)
	off := 0
	for _, a := range apply {
		n := len(a.Value.Cmds)
		if n > 0 {
			g.sm.Apply(a.Instance, a.Value.Cmds, smw, res[off:off+n])
		}
		off += n
	}
	last := apply[len(apply)-1].Instance
	switch {
	case g.ckpt == nil:
		b.SetApplied(g.id, last)
		g.checkpointed = last
	case last-g.checkpointed >= g.cfg.CheckpointEvery || g.ckpt.CheckpointDue():
		g.checkpoint(b, last)
	}
	return res
}

// checkpoint writes a Checkpointer's changes and the applied instance
// they bring the keyspace to into b.
func (g *Group) checkpoint(b *Batch, applied uint64) {
	g.ckpt.Checkpoint(b.SM(g.id))
	b.SetApplied(g.id, applied)
	g.checkpointed = applied
}

// answer hands each proposer of this replica its command's result.
func (g *Group) answer(apply []Applied, res []any) {
	off := 0
	for _, a := range apply {
		for i, tag := range a.Tags {
			if cb, ok := g.tags[tag]; ok {
				delete(g.tags, tag)
				cb(Result{Instance: a.Instance, Index: i, Value: res[off+i]})
			}
		}
		off += len(a.Value.Cmds)
	}
}

func (g *Group) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

func (g *Group) handleReadyFinal() {
	g.resolveFailed(g.core.Ready().Failed)
	g.failAll(ErrStopped)
}

// resolveFailed tells the proposers of failed commands.
func (g *Group) resolveFailed(fs []Failed) {
	for _, f := range fs {
		for _, tag := range f.Tags {
			if cb, ok := g.tags[tag]; ok {
				delete(g.tags, tag)
				cb(Result{Err: f.Err})
			}
		}
	}
}

func (g *Group) failAll(err error) {
	for tag, cb := range g.tags {
		delete(g.tags, tag)
		cb(Result{Err: err})
	}
	g.mu.Lock()
	props := g.props
	g.props = nil
	g.mu.Unlock()
	for _, p := range props {
		p.cb(Result{Err: err})
	}
}

func (g *Group) publish() {
	if g.halted {
		return
	}
	var until time.Time
	if exp := g.core.LeaseExpiry(); exp > 0 {
		until = g.base.Add(time.Duration(exp) * g.host.cfg.Tick)
	}
	next := statusSnapshot{
		leaseUntil: until,
		soft:       g.core.Status(),
		committed:  g.core.Committed(),
		applied:    g.core.AppliedIndex(),
		logStart:   g.core.LogStart(),
	}
	// Most rounds (ticks, heartbeats of an idle group) change nothing:
	// keep the snapshot rather than allocate a new one per group and round.
	if cur := g.status.Load(); cur != nil && cur.soft == next.soft && cur.leaseUntil.Equal(next.leaseUntil) &&
		cur.committed == next.committed && cur.applied == next.applied && cur.logStart == next.logStart {
		return
	}
	g.status.Store(&next)
}

func (g *Group) maybeTruncate() {
	// Only behind what the keyspace reflects: a restart replays the log
	// above it.
	applied := g.checkpointed
	start := g.core.LogStart()
	if applied < start+2*g.cfg.KeepLog {
		return
	}
	before := applied - g.cfg.KeepLog
	if err := g.store.TruncateLog(g.id, before); err != nil {
		g.log.Warn("paxos: truncate failed", "group", g.id, "err", err)
		return
	}
	g.core.Compacted(before)
}

// Host runs every group of one node: it keeps the groups' clock (ticks of
// HostConfig.Tick, handed over when a core has something due) and routes
// the transport's messages to the groups.
//
// One loop per node drives every group's core, in rounds: it takes what
// arrived for all groups, lets each core produce its Ready, and carries
// them out together — one Pebble batch for every group's promises, accepts
// and applies, one transport call for every group's requests. The loop does
// not wait for the batch's fsync: it applies the batch (visible at once,
// durable in order) and hands it to the sync goroutine, which waits for the
// fsync and then sends the round's votes and promises (Ready's
// MessagesAfterSync), stepping those addressed to this node back into their
// cores. So round k+1 is built and its Accepts leave while round k's fsync
// runs, and the groups' syncs still share fsyncs (Pebble groups concurrent
// syncs of its one WAL). That is the contract of Ready, and the simulator
// checks it by carrying Readys out in the same order.
type Host struct {
	cfg      HostConfig
	base     time.Time // tick 0 of the host's clock; each group's ticks are host ticks
	groups   atomic.Pointer[map[GroupID]*Group]
	list     atomic.Pointer[[]*Group] // the groups, by id
	mu       sync.Mutex
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	tr       Transport

	wake    chan struct{}
	done    chan struct{}
	running atomic.Bool

	// syncs carries applied batches, in order, from the loop to the sync
	// goroutine; free holds batches it has synced, for reuse.
	syncs    chan pendingSync
	syncDone chan struct{}
	free     chan *Batch
	// stopErr is what proposals get once a storage failure stopped the
	// groups: ErrStopped wrapping the store's error.
	stopErr atomic.Pointer[error]

	// owned by the loop
	items          []readyItem
	reqs           []Message
	after          []Message
	stoppedOnError bool
}

// pendingSync is one round handed to the sync goroutine: its batch (nil
// when it wrote nothing) and the messages that wait for its fsync.
type pendingSync struct {
	b     *Batch
	after []Message
}

type readyItem struct {
	g  *Group
	rd Ready
}

// HostConfig configures a Host.
type HostConfig struct {
	Self  NodeID
	Store *Store
	// Tick is the length of one core tick on the monotonic clock
	// (default 10ms).
	Tick   time.Duration
	Logger *slog.Logger
}

// NewHost returns a Host; set its transport with SetTransport and add
// groups with AddGroup, then Start it.
func NewHost(cfg HostConfig) *Host {
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Host{
		cfg: cfg, base: time.Now(), stop: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
		syncs: make(chan pendingSync, 256), syncDone: make(chan struct{}), free: make(chan *Batch, 64),
	}
	empty := map[GroupID]*Group{}
	h.groups.Store(&empty)
	var none []*Group
	h.list.Store(&none)
	return h
}

// SetTransport sets the transport messages leave by. Its handler should be
// Host.Deliver.
func (h *Host) SetTransport(t Transport) { h.tr = t }

// Deliver routes received messages to their groups; it is the transport's
// handler.
func (h *Host) Deliver(msgs []Message) {
	groups := *h.groups.Load()
	// Messages of one read usually belong to a few groups; hand each group
	// its run in one call.
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].Group == msgs[i].Group {
			j++
		}
		if g, ok := groups[msgs[i].Group]; ok {
			g.deliver(msgs[i:j])
		}
		i = j
	}
}

func (h *Host) send(msgs []Message) {
	if h.tr != nil {
		h.tr.Send(msgs)
	}
}

// Group returns the group with id, or nil.
func (h *Host) Group(id GroupID) *Group { return (*h.groups.Load())[id] }

// AddGroup opens group cfg.Core.Group from the store, loads sm and adds
// the group to the host's loop.
func (h *Host) AddGroup(cfg GroupConfig, sm StateMachine) (*Group, error) {
	cfg.Core.ID = h.cfg.Self
	cfg.Core.setDefaults()
	if cfg.KeepLog == 0 {
		cfg.KeepLog = 20000
	}
	if cfg.SnapshotChunk <= 0 {
		cfg.SnapshotChunk = 1 << 20
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 2048
	}
	id := cfg.Core.Group
	if err := h.storageFailure(); err != nil {
		return nil, fmt.Errorf("paxos: group %d: %w", id, err)
	}
	// The core's tick 0 is the next tick of the host's clock, so that
	// every group is ticked at the same moments and heartbeats in step
	// with the others (Config.TickPhase). Its first tick is a whole one.
	phase := uint64(time.Since(h.base)/h.cfg.Tick) + 1
	base := h.base.Add(time.Duration(phase) * h.cfg.Tick)
	cfg.Core.TickPhase = phase
	st := h.cfg.Store
	gs, err := st.LoadGroup(id)
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d: %w", id, err)
	}
	init := InitState{Hard: gs.Hard, LogStart: gs.LogStart, Applied: gs.Applied}
	if gs.Restoring {
		// A snapshot install was cut short: the state machine's keyspace
		// is incomplete. Start empty and fetch a snapshot again.
		h.cfg.Logger.Warn("paxos: interrupted snapshot install; refetching", "group", id)
		init.NeedSnapshot = true
	}
	if gs.Last > gs.Applied {
		// Every accepted entry, gaps and all: each is a vote the core
		// must report when a candidate asks.
		es, err := st.EntriesFrom(id, gs.Applied+1)
		if err != nil {
			return nil, fmt.Errorf("paxos: group %d: %w", id, err)
		}
		init.Entries = es
	}
	if !init.NeedSnapshot {
		if err := sm.Load(st.SMReader(id), gs.Applied); err != nil {
			return nil, fmt.Errorf("paxos: group %d: load state machine: %w", id, err)
		}
	}
	core, err := NewCore(cfg.Core, init, groupLog{st, id})
	if err != nil {
		return nil, err
	}
	g := &Group{
		id:      id,
		host:    h,
		core:    core,
		sm:      sm,
		cfg:     cfg,
		log:     h.cfg.Logger,
		store:   st,
		tags:    make(map[uint64]Callback),
		streams: make(map[NodeID]chan uint64),
		base:    base,

		checkpointed: gs.Applied,
	}
	g.ckpt, _ = sm.(Checkpointer)
	g.publish()
	h.mu.Lock()
	old := *h.groups.Load()
	if _, dup := old[id]; dup {
		h.mu.Unlock()
		return nil, fmt.Errorf("paxos: group %d added twice", id)
	}
	next := make(map[GroupID]*Group, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[id] = g
	h.groups.Store(&next)
	list := make([]*Group, 0, len(next))
	for _, x := range next {
		list = append(list, x)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	h.list.Store(&list)
	h.mu.Unlock()
	h.signal()
	return g, nil
}

func (h *Host) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Start starts the loop that drives the groups and the sync goroutine.
func (h *Host) Start() {
	h.running.Store(true)
	go h.syncLoop()
	go h.run()
}

// run is the host's loop. It wakes when something arrives for a group and
// when a core's next tick is due (Core.NextTick) — not on every tick: an
// idle node wakes for its heartbeats and little else. Each pass hands
// every group the ticks that passed, what arrived, then carries out the
// Readys, and sets the timer for the earliest tick any core waits for.
func (h *Host) run() {
	defer close(h.done)
	timer := time.AfterFunc(time.Hour, h.signal)
	defer timer.Stop()
	var wakeAt time.Time // when timer fires
	for range h.wake {
		select {
		case <-h.stop:
			h.finish()
			return
		default:
		}
		groups := *h.list.Load()
		now := time.Now()
		for _, g := range groups {
			g.drain(now)
		}
		h.readyRound(groups)
		var next time.Time
		for _, g := range groups {
			g.publish()
			if g.isClosed() {
				continue
			}
			if at := g.wakeAt(); next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if err := h.storageFailure(); err != nil && !h.stoppedOnError {
			h.failStorage(err)
		}
		if !next.IsZero() && !next.Equal(wakeAt) {
			wakeAt = next
			timer.Reset(time.Until(next))
		}
	}
}

// readyRound carries out every group's Ready, together, until no group
// has more. Each round is one Pebble batch for every group's hard state,
// entries and applies, applied without waiting for its fsync (see Host).
//
// The order within a round follows Ready's contract: a group whose
// mastership changed publishes its status and tells its state machine
// first (a master that hands over stops serving before its TimeoutNow
// leaves); chosen instances are applied and answered at once (chosen means
// a quorum voted after its own fsync, so the answer is durable whatever
// this node's disk holds); the round's requests (Accept, Prepare,
// Heartbeat, ...) leave right away, so that this node's fsync overlaps the
// followers'; its votes and promises wait in the sync goroutine.
//
// Committed alone is never written: it may be persisted lazily (HardState),
// a restarted replica starts from its applied instance and relearns the
// rest, so it goes to disk only with a Promised change.
func (h *Host) readyRound(groups []*Group) {
	for !h.stoppedOnError {
		items := h.items[:0]
		for _, g := range groups {
			if g.isClosed() || !g.core.HasReady() {
				continue
			}
			items = append(items, readyItem{g: g, rd: g.core.Ready()})
		}
		h.items = items
		if len(items) == 0 {
			return
		}
		b := h.batchForRound()
		reqs, after := h.reqs[:0], h.after[:0]
		progress, sync := false, false
		for i := range items {
			g, rd := items[i].g, &items[i].rd
			if !rd.Empty() {
				progress = true
			}
			if rd.SoftChanged {
				g.publish()
				if mo, ok := g.sm.(MasterObserver); ok {
					mo.MasterChanged(rd.Soft)
				}
			}
			if rd.NeedsSync() {
				sync = true
			}
			if rd.HardStateChanged {
				b.SetHardState(g.id, rd.HardState)
			}
			for j := range rd.Entries {
				b.PutEntry(g.id, &rd.Entries[j])
			}
			if len(rd.Apply) > 0 {
				res := g.apply(b, rd.Apply)
				g.answer(rd.Apply, res)
				clear(res)
			}
			g.resolveFailed(rd.Failed)
			reqs = append(reqs, rd.Messages...)
			after = append(after, rd.MessagesAfterSync...)
			for _, p := range rd.SendSnapshot {
				g.startStream(p)
			}
			g.core.Advance(*rd)
			if invariants.Enabled {
				g.core.assertInvariants("Advance")
			}
		}
		if len(reqs) > 0 {
			h.send(reqs)
		}
		ok := h.handOff(b, sync, after)
		clear(reqs)
		h.reqs, h.after = reqs[:0], after[:0]
		if ok {
			for i := range items {
				items[i].g.maybeTruncate()
			}
		}
		clear(items)
		if !ok || !progress {
			return // storage failed, or a core said it had work and produced none
		}
	}
}

// batchForRound returns an empty batch: one the sync goroutine finished
// with, or a new one.
func (h *Host) batchForRound() *Batch {
	select {
	case b := <-h.free:
		return b
	default:
		return h.cfg.Store.NewBatch()
	}
}

// handOff applies b (without waiting for its fsync) and queues it, with
// the messages that wait for it, to the sync goroutine. A round whose
// writes need no durability (applies only: a replica that loses them
// applies the log again) is committed without a sync of its own; its
// messages, like those of a round that wrote nothing, still queue: they
// must wait for the earlier rounds' fsyncs. That halves the fsyncs per
// command (a master's apply round and a follower's learn round wrote
// synced batches too). It reports false when storage failed.
func (h *Host) handOff(b *Batch, sync bool, after []Message) bool {
	switch {
	case b.Empty():
		h.recycle(b)
		b = nil
	case !sync:
		err := b.Commit(false)
		h.recycle(b)
		b = nil
		if err != nil {
			h.failStorage(err)
			return false
		}
	default:
		if err := b.Apply(); err != nil {
			h.recycle(b)
			h.failStorage(err)
			return false
		}
	}
	if b == nil && len(after) == 0 {
		return true
	}
	h.syncs <- pendingSync{b: b, after: slices.Clone(after)}
	return true
}

func (h *Host) recycle(b *Batch) {
	select {
	case h.free <- b:
	default:
		b.Close()
	}
}

// syncLoop waits for each round's fsync, in order, then sends the round's
// after-sync messages; those for this node go straight to their groups.
// After a storage failure nothing more is sent, not even the messages of
// rounds whose fsync succeeded: a vote must not vouch for a write that
// may not be on disk, and the groups are stopping. A failed fsync has
// failed the store (Store.Err) before SyncWait returns; the loop, woken,
// stops the groups.
func (h *Host) syncLoop() {
	defer close(h.syncDone)
	var self []Message
	for p := range h.syncs {
		if p.b != nil {
			if err := p.b.SyncWait(); err != nil {
				h.signal()
			}
			h.recycle(p.b)
		}
		if len(p.after) == 0 || h.storageFailure() != nil {
			continue
		}
		out := p.after[:0]
		self = self[:0]
		for _, m := range p.after {
			if m.To == h.cfg.Self {
				self = append(self, m)
			} else {
				out = append(out, m)
			}
		}
		if len(out) > 0 {
			h.send(out)
		}
		if len(self) > 0 {
			h.Deliver(self)
		}
	}
}

// storageFailure returns the store's failure (Store.Err), or nil.
func (h *Host) storageFailure() error {
	if h.cfg.Store == nil {
		return nil
	}
	return h.cfg.Store.Err()
}

// Err returns nil while the host runs its groups, and once a storage
// failure stopped them the error every proposal then gets: it matches
// ErrStopped and ErrStorageFailed and wraps the cause.
func (h *Host) Err() error {
	if p := h.stopErr.Load(); p != nil {
		return *p
	}
	return nil
}

// failStorage stops every group after a failed write or fsync, for good
// (fail-stop): a replica must not answer or vote from state it could not
// persist, and Pebble cannot go on after a failed WAL write. Every pending
// proposal fails with Host.Err, as does every later one; the groups stop
// taking messages, report no master and not serving, and tell their state
// machines (MasterObserver) so; nothing more is written or sent. The other
// replicas elect masters among themselves once this one's leases run out.
// The process keeps running so that the node can report the failure
// (Store.Err); a restart once the disk is fixed recovers from what reached
// it. It runs on the loop.
func (h *Host) failStorage(err error) {
	if h.stoppedOnError {
		return
	}
	h.stoppedOnError = true
	if h.cfg.Store != nil {
		err = h.cfg.Store.h.fail(err) // latches it if it did not fail the store yet
	}
	stop := fmt.Errorf("%w: %w", ErrStopped, err)
	h.stopErr.Store(&stop)
	groups := *h.list.Load()
	h.cfg.Logger.Warn("paxos: stopped every group after a storage failure", "groups", len(groups), "err", err)
	for _, g := range groups {
		g.stopOnStorage(stop)
	}
}

// stopOnStorage closes the group after a storage failure (see failStorage).
func (g *Group) stopOnStorage(err error) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.failAll(err)
	g.halted = true
	cur := g.status.Load()
	next := *cur
	next.soft, next.leaseUntil = SoftState{}, time.Time{}
	g.status.Store(&next)
	if cur.soft != next.soft {
		if mo, ok := g.sm.(MasterObserver); ok {
			mo.MasterChanged(next.soft)
		}
	}
}

// finish fails whatever is pending in every group when the host stops,
// and checkpoints the groups whose state machines checkpoint, so that the
// next start has no log to replay.
func (h *Host) finish() {
	if !h.stoppedOnError && h.storageFailure() == nil && h.cfg.Store != nil {
		b := h.cfg.Store.NewBatch()
		for _, g := range *h.list.Load() {
			if g.ckpt != nil && !g.isClosed() && g.core.AppliedIndex() > g.checkpointed {
				g.checkpoint(b, g.core.AppliedIndex())
			}
		}
		if err := b.Commit(true); err != nil {
			h.cfg.Logger.Error("paxos: checkpoint at stop", "err", err)
		}
		b.Close()
	}
	for _, g := range *h.list.Load() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		g.core.Flush(ErrStopped)
		g.handleReadyFinal()
	}
}

// Stop stops the ticker and the loop, failing every pending proposal with
// ErrStopped. It does not close the store or the transport.
//
// Stop may be called more than once, also concurrently: every call returns
// once the host has stopped.
func (h *Host) Stop() {
	h.stopOnce.Do(h.stopNow)
}

func (h *Host) stopNow() {
	close(h.stop)
	h.wg.Wait()
	if h.running.Load() {
		h.signal()
		<-h.done
		// The loop has stopped queueing; let the sync goroutine finish the
		// fsyncs it waits for (a batch cannot be closed before).
		close(h.syncs)
		<-h.syncDone
	} else {
		h.finish()
	}
	for {
		select {
		case b := <-h.free:
			b.Close()
		default:
			return
		}
	}
}

type groupLog struct {
	s *Store
	g GroupID
}

func (l groupLog) Entries(from, to uint64, maxBytes int) ([]Entry, error) {
	return l.s.Entries(l.g, from, to, maxBytes)
}

// startStream streams a snapshot of the group to peer p, one chunk at a
// time, each acknowledged before the next (the transport may drop).
func (g *Group) startStream(p NodeID) {
	g.mu.Lock()
	if g.streams[p] != nil || g.closed {
		g.mu.Unlock()
		return
	}
	acks := make(chan uint64, 4)
	g.streams[p] = acks
	g.mu.Unlock()
	go func() {
		defer func() {
			g.mu.Lock()
			delete(g.streams, p)
			g.mu.Unlock()
		}()
		if err := g.stream(p, acks); err != nil {
			g.log.Warn("paxos: snapshot stream failed", "group", g.id, "to", p, "err", err)
		}
	}()
}

func (g *Group) stream(p NodeID, acks chan uint64) error {
	src, err := g.store.OpenSnapshot(g.id, g.cfg.SnapshotChunk)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }() // a read-only view: closing it fails only when closed twice
	g.log.Info("paxos: streaming snapshot", "group", g.id, "to", p, "applied", src.Applied())
	for seq := uint64(0); ; seq++ {
		chunk, last, err := src.Next()
		if err != nil {
			return err
		}
		m := Message{Type: MsgSnapshot, Group: g.id, From: g.host.cfg.Self, To: p, Instance: src.Applied(), Tick: seq, Reject: last, Chunk: append([]byte(nil), chunk...)}
		acked := false
		for try := 0; try < 5 && !acked; try++ {
			g.host.send([]Message{m})
			timer := time.NewTimer(2 * time.Second)
		wait:
			for {
				select {
				case a, ok := <-acks:
					if !ok {
						timer.Stop()
						return ErrStopped
					}
					if a == seq {
						acked = true
						break wait
					}
				case <-timer.C:
					break wait
				case <-g.host.stop:
					timer.Stop()
					return ErrStopped
				}
			}
			timer.Stop()
		}
		if !acked {
			return fmt.Errorf("paxos: snapshot chunk %d not acknowledged", seq)
		}
		if last {
			return nil
		}
	}
}

// onSnapshotMsg handles snapshot chunks and their acknowledgements on the
// host's loop.
func (g *Group) onSnapshotMsg(m *Message) {
	if m.Snapshot { // an acknowledgement for a stream of ours
		g.mu.Lock()
		ch := g.streams[m.From]
		g.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m.Tick:
			default:
			}
		}
		return
	}
	ack := func() {
		g.host.send([]Message{{Type: MsgSnapshot, Group: g.id, From: g.host.cfg.Self, To: m.From, Instance: m.Instance, Tick: m.Tick, Snapshot: true}})
	}
	in := g.install
	if m.Tick == 0 {
		if m.Instance < g.core.LogStart()-1 || (m.Instance <= g.core.AppliedIndex() && !g.core.needSnap) {
			// Not useful; acknowledge every chunk so the sender finishes.
			ack()
			return
		}
		if in != nil {
			if in.from == m.From && in.applied == m.Instance {
				ack() // a duplicate first chunk
				return
			}
			_ = in.si.Abort()
		}
		si, err := g.store.BeginInstall(g.id)
		if err != nil {
			g.log.Error("paxos: begin snapshot install", "group", g.id, "err", err)
			return
		}
		in = &snapInstall{from: m.From, applied: m.Instance, si: si}
		g.install = in
	}
	if in == nil || in.from != m.From || in.applied != m.Instance {
		if in == nil && m.Instance <= g.core.AppliedIndex() {
			ack()
		}
		return
	}
	if m.Tick < in.next {
		ack() // duplicate
		return
	}
	if m.Tick > in.next {
		return
	}
	if err := in.si.AddChunk(m.Chunk); err != nil {
		g.log.Error("paxos: snapshot chunk", "group", g.id, "from", m.From, "err", err)
		_ = in.si.Abort()
		g.install = nil
		return
	}
	in.next++
	if m.Reject { // the last chunk
		if err := in.si.Finish(in.applied); err != nil {
			g.log.Error("paxos: finish snapshot install", "group", g.id, "err", err)
			g.install = nil
			return
		}
		g.install = nil
		if err := g.sm.Load(g.store.SMReader(g.id), in.applied); err != nil {
			g.log.Error("paxos: load installed snapshot", "group", g.id, "err", err)
			return
		}
		g.checkpointed = in.applied
		g.core.SnapshotInstalled(in.applied)
		g.log.Info("paxos: installed snapshot", "group", g.id, "from", m.From, "applied", in.applied)
	}
	ack()
}
