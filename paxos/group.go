package paxos

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// StateMachine is the replicated application a Group drives. Apply runs on
// every replica in log order, on the group's goroutine.
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

// MasterObserver, when a StateMachine implements it, is told on the group's
// goroutine whenever the replica's view of mastership changes.
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

// Callback receives a command's Result. It runs on the group's goroutine
// (or, for errors found at once, on the submitter's) and must not block.
type Callback func(Result)

// GroupConfig configures one group on a Host.
type GroupConfig struct {
	Core Config
	// KeepLog is how many applied instances stay in the log behind the
	// applied instance before it is truncated (default 20000).
	KeepLog uint64
	// SnapshotChunk is the size of snapshot chunks (default 1 MiB).
	SnapshotChunk int
}

// Group runs one Core with storage, transport and ticks.
type Group struct {
	id    GroupID
	host  *Host
	core  *Core
	sm    StateMachine
	cfg   GroupConfig
	log   *slog.Logger
	store *Store

	mu sync.Mutex
	// guarded by mu
	inbox   []Message
	props   []proposal
	ticks   int
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
	delivered uint64    // ticks handed to the core (host ticker only)
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
// for the group's goroutine. Serving is true only while the master's lease
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
		cb(Result{Err: ErrNotMaster})
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cb(Result{Err: ErrStopped})
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
	if len(g.inbox) > 1<<16 {
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

// tick hands the group every tick due by now: tick k is due at
// base + k*Tick on the monotonic clock, so ticks missed while the process
// was paused all arrive at once (a lease measured in ticks then ends on
// time). Only the host's ticker goroutine calls it.
func (g *Group) tick(now time.Time) {
	if now.Before(g.base) {
		return
	}
	due := uint64(now.Sub(g.base) / g.host.cfg.Tick)
	if due <= g.delivered {
		return
	}
	n := int(due - g.delivered)
	g.delivered = due
	g.mu.Lock()
	g.ticks += n
	g.mu.Unlock()
	g.signal()
}

// drain moves what arrived for the group into its core: controls, ticks,
// messages (snapshot chunks go to the runtime) and proposals. Only the
// host's loop calls it.
func (g *Group) drain() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	inbox, props, ctrl := g.inbox, g.props, g.ctrl
	g.inbox, g.props, g.ctrl = g.inboxSpare[:0], g.propsSpare[:0], g.ctrlSpare[:0]
	g.pending -= len(props)
	ticks := g.ticks
	g.ticks = 0
	g.mu.Unlock()

	for _, f := range ctrl {
		f(g.core)
	}
	for range ticks {
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
	b.SetApplied(g.id, apply[len(apply)-1].Instance)
	return res
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
	rd := g.core.Ready()
	for _, f := range rd.Failed {
		for _, tag := range f.Tags {
			if cb, ok := g.tags[tag]; ok {
				delete(g.tags, tag)
				cb(Result{Err: f.Err})
			}
		}
	}
	g.failAll(ErrStopped)
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
	var until time.Time
	if exp := g.core.LeaseExpiry(); exp > 0 {
		until = g.base.Add(time.Duration(exp) * g.host.cfg.Tick)
	}
	g.status.Store(&statusSnapshot{
		leaseUntil: until,
		soft:       g.core.Status(),
		committed:  g.core.Committed(),
		applied:    g.core.AppliedIndex(),
		logStart:   g.core.LogStart(),
	})
}

func (g *Group) maybeTruncate() {
	applied := g.core.AppliedIndex()
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

// Host runs every group of one node: it owns the ticker and routes the
// transport's messages to the groups.
//
// One loop per node drives every group's core: it takes what arrived for
// all groups, lets each core produce its Ready, and carries them out
// together — one Pebble commit (one fsync) for every group's promises and
// accepts, one transport call for every group's messages. At 64 clients
// over 15 groups that is several groups' instances per fsync instead of
// one, which is what DESIGN asks for ("one fsync shared by all groups").
type Host struct {
	cfg    HostConfig
	base   time.Time // tick 0 of the host's clock; each group's ticks are host ticks
	groups atomic.Pointer[map[GroupID]*Group]
	list   atomic.Pointer[[]*Group] // the groups, by id
	mu     sync.Mutex
	stop   chan struct{}
	wg     sync.WaitGroup
	tr     Transport

	wake    chan struct{}
	done    chan struct{}
	running atomic.Bool

	// owned by the loop
	batch   *Batch // one round's promises, accepts and applies
	items   []readyItem
	reqs    []Message
	replies []Message
}

type readyItem struct {
	g     *Group
	rd    Ready
	res   []any
	early bool
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
	h := &Host{cfg: cfg, base: time.Now(), stop: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	empty := map[GroupID]*Group{}
	h.groups.Store(&empty)
	var none []*Group
	h.list.Store(&none)
	if cfg.Store != nil {
		h.batch = cfg.Store.NewBatch()
	}
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

// AddGroup opens group cfg.Core.Group from the store, loads sm and starts
// the group's goroutine.
func (h *Host) AddGroup(cfg GroupConfig, sm StateMachine) (*Group, error) {
	cfg.Core.ID = h.cfg.Self
	cfg.Core.setDefaults()
	if cfg.KeepLog == 0 {
		cfg.KeepLog = 20000
	}
	if cfg.SnapshotChunk <= 0 {
		cfg.SnapshotChunk = 1 << 20
	}
	id := cfg.Core.Group
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
	}
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

// Start starts the loop that drives the groups and the ticker.
func (h *Host) Start() {
	h.running.Store(true)
	go h.run()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(h.cfg.Tick)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				// Not the channel's time: after a pause that one is stale.
				now := time.Now()
				for _, g := range *h.list.Load() {
					g.tick(now)
				}
			}
		}
	}()
}

func (h *Host) run() {
	defer close(h.done)
	for range h.wake {
		select {
		case <-h.stop:
			h.finish()
			return
		default:
		}
		groups := *h.list.Load()
		for _, g := range groups {
			g.drain()
		}
		h.readyRound(groups)
		for _, g := range groups {
			g.publish()
		}
	}
}

// readyRound carries out every group's Ready, together, until no group
// has more, with one Pebble commit per round for every group's hard state,
// entries and applies.
//
// Applies whose instances were chosen in an earlier Ready are answered as
// soon as the state machine has run, before the round's commit: their
// entries are durable already (on a quorum, and on this node since the
// commit of the round that wrote them), and the state machine's writes
// need no durability before the answer (a replica that loses them applies
// the log again) nor visibility (the state machine reads its keyspace only
// when it loads). The previous runtime committed them without sync first;
// that second Pebble commit per round is gone.
//
// Requests (Accept, Prepare, Heartbeat, ...) leave before the batch is
// durable, so that this node's fsync overlaps the followers'; it counts its
// own vote only through a reply it processes after the commit returned.
// Replies (Promise, Accepted, ...) wait for the commit: they vouch for it.
//
// Committed alone is never written: it may be persisted lazily (HardState),
// a restarted replica starts from its applied instance and relearns the
// rest, so it goes to disk only with a Promised change. That is one Pebble
// key fewer per group and round on every replica.
func (h *Host) readyRound(groups []*Group) {
	b := h.batch
	for {
		items := h.items[:0]
		for _, g := range groups {
			if g.isClosed() || !g.core.HasReady() {
				continue
			}
			rd := g.core.Ready()
			it := readyItem{g: g, rd: rd}
			// Early answers only for instances chosen in an earlier Ready,
			// whose entries are durable already (an instance chosen and
			// applied in this Ready, as on a single node, waits for the
			// sync of its own entry).
			it.early = len(rd.Apply) > 0 && (len(rd.Entries) == 0 || rd.Entries[0].Instance > rd.Apply[len(rd.Apply)-1].Instance)
			if it.early {
				it.res = g.apply(b, rd.Apply)
				g.answer(rd.Apply, it.res)
				clear(it.res)
			}
			items = append(items, it)
		}
		h.items = items
		if len(items) == 0 {
			return
		}
		progress := false
		sync := false
		reqs, replies := h.reqs[:0], h.replies[:0]
		for i := range items {
			it := &items[i]
			g, rd := it.g, &it.rd
			if !rd.Empty() {
				progress = true
			}
			if rd.HardStateChanged || len(rd.Entries) > 0 {
				sync = true
			}
			if rd.HardStateChanged {
				b.SetHardState(g.id, rd.HardState)
			}
			for j := range rd.Entries {
				b.PutEntry(g.id, &rd.Entries[j])
			}
			if !it.early {
				it.res = g.apply(b, rd.Apply)
			}
			for _, m := range rd.Messages {
				switch m.Type {
				case MsgPromise, MsgAccepted, MsgHeartbeatAck:
					replies = append(replies, m)
				default:
					reqs = append(reqs, m)
				}
			}
		}
		if len(reqs) > 0 {
			h.send(reqs)
		}
		ok := h.commit(b, sync)
		if ok && len(replies) > 0 {
			h.send(replies)
		}
		clear(reqs)
		clear(replies)
		h.reqs, h.replies = reqs[:0], replies[:0]
		if !ok {
			return
		}
		for i := range items {
			it := &items[i]
			g, rd := it.g, &it.rd
			if !it.early {
				g.answer(rd.Apply, it.res)
				clear(it.res)
			}
			for _, f := range rd.Failed {
				for _, tag := range f.Tags {
					if cb, ok := g.tags[tag]; ok {
						delete(g.tags, tag)
						cb(Result{Err: f.Err})
					}
				}
			}
			for _, p := range rd.SendSnapshot {
				g.startStream(p)
			}
			if rd.SoftChanged {
				if mo, ok := g.sm.(MasterObserver); ok {
					mo.MasterChanged(rd.Soft)
				}
			}
			g.core.Advance(*rd)
			g.maybeTruncate()
		}
		clear(items)
		if !progress {
			return // a core said it had work and produced none: do not spin
		}
	}
}

// commit commits b. A storage failure stops every group: a replica must
// not answer from state it could not persist.
func (h *Host) commit(b *Batch, sync bool) bool {
	if b.Empty() {
		return true
	}
	if err := b.Commit(sync); err != nil {
		h.cfg.Logger.Error("paxos: commit failed; stopping every group", "err", err)
		for _, g := range *h.list.Load() {
			g.failAll(fmt.Errorf("paxos: storage: %w", err))
			g.mu.Lock()
			g.closed = true
			g.mu.Unlock()
		}
		return false
	}
	return true
}

// finish fails whatever is pending in every group when the host stops.
func (h *Host) finish() {
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
func (h *Host) Stop() {
	select {
	case <-h.stop:
		return
	default:
	}
	close(h.stop)
	h.wg.Wait()
	if h.running.Load() {
		h.signal()
		<-h.done
	} else {
		h.finish()
	}
	if h.batch != nil {
		h.batch.Close()
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
	defer src.Close()
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
// group's goroutine.
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
		g.core.SnapshotInstalled(in.applied)
		g.log.Info("paxos: installed snapshot", "group", g.id, "from", m.From, "applied", in.applied)
	}
	ack()
}
