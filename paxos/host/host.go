package host

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/clock"
	"github.com/paxlock/paxlock/internal/invariants"
	"github.com/paxlock/paxlock/paxos"
)

// Host runs every group of one node: it keeps the groups' clock (ticks of
// Config.Tick, handed over when a core has something due) and routes
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
	cfg      Config
	clock    clock.Clock // cfg.Clock
	base     time.Time   // tick 0 of the host's clock; each group's ticks are host ticks
	groups   atomic.Pointer[map[paxos.GroupID]*Replica]
	list     atomic.Pointer[[]*Replica] // the groups, by id
	mu       sync.Mutex
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	tr       paxos.Transport

	wake    chan struct{}
	done    chan struct{}
	running atomic.Bool

	// syncs carries applied batches, in order, from the loop to the sync
	// goroutine; free holds batches it has synced, for reuse (freeBatches
	// of them: a few rounds are in flight at a time, and each kept batch
	// keeps the buffer of the largest round it carried).
	syncs    chan pendingSync
	syncDone chan struct{}
	free     chan paxos.Batch
	// queued counts the rounds handed to the sync goroutine that it has
	// not finished (fsync waited for and messages sent). While it is 0 a
	// round that wrote nothing to sync sends its after-sync messages from
	// the loop itself: every earlier round's are already out.
	queued atomic.Int64
	// stopErr is what proposals get once a storage failure stopped the
	// groups: ErrStopped wrapping the store's error.
	stopErr atomic.Pointer[error]

	// owned by the loop
	items          []readyItem
	reqs           []paxos.Message
	after          []paxos.Message
	self           []paxos.Message // sendAfter's scratch, on the loop
	stoppedOnError bool
}

// pendingSync is one round handed to the sync goroutine: its batch (nil
// when it wrote nothing) and the messages that wait for its fsync.
type pendingSync struct {
	b     paxos.Batch
	after []paxos.Message
	at    time.Time // when b was applied (zero: no Observer)
}

type readyItem struct {
	g  *Replica
	rd paxos.Ready
}

// Config configures a Host.
type Config struct {
	Self paxos.NodeID
	// Store keeps the groups' durable state (a *pebblestore.Store in production).
	Store paxos.Storage
	// Tick is the length of one core tick on the monotonic clock
	// (default 10ms).
	Tick time.Duration
	// Clock is the monotonic clock the host takes its ticks, leases and
	// timeouts from (nil: the process's, clock.Real).
	Clock clock.Clock
	// Transport carries the groups' messages to their peers (a
	// *tcpnet.Transport in production). Its handler, bound once the host
	// exists (the transport's SetHandler), is Host.Deliver. Nil: messages
	// to other nodes are dropped (a node alone, in tests).
	Transport paxos.Transport
	Logger    *slog.Logger
	// Observer, if set, is told of the loop's rounds and the store's
	// fsyncs, for metrics.
	Observer Observer
}

// Observer is told of a Host's work, for metrics (package server turns it
// into Prometheus histograms; package host has no metrics dependency). Its
// methods run on the host's loop and its sync goroutine, once per round,
// instance or fsync: they must return at once, without blocking or
// allocating.
type Observer interface {
	// InstanceApplied: one chosen instance, holding commands commands,
	// was applied.
	InstanceApplied(commands int)
	// RoundApplied: one round of the loop applied instances chosen
	// instances (of every group), d after the round began by taking in
	// the messages that told it they were chosen.
	RoundApplied(instances int, d time.Duration)
	// Synced: a round's batch was durable d after it was written to the
	// store (its fsync, and the wait for earlier rounds' fsyncs).
	Synced(d time.Duration)
	// Proposed: a command submitted on this replica (its master) was
	// chosen and applied, or failed when ok is false, d after Submit.
	Proposed(d time.Duration, ok bool)
}

// freeBatches is how many synced batches the host keeps for reuse.
const freeBatches = 16

// nanotime returns the time since the host was made, on the monotonic
// clock, never 0.
func (h *Host) nanotime() int64 { return int64(h.clock.Now().Sub(h.base)) | 1 }

// New returns a Host sending by cfg.Transport; bind the transport's
// handler to Deliver, add this node's replicas of Paxos groups with
// AddReplica, then Start it.
func New(cfg Config) *Host {
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	h := &Host{
		cfg: cfg, tr: cfg.Transport, clock: cfg.Clock, base: cfg.Clock.Now(), stop: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
		syncs: make(chan pendingSync, 256), syncDone: make(chan struct{}), free: make(chan paxos.Batch, freeBatches),
	}
	empty := map[paxos.GroupID]*Replica{}
	h.groups.Store(&empty)
	var none []*Replica
	h.list.Store(&none)
	return h
}

// Deliver routes received messages to their groups; it is the transport's
// handler.
func (h *Host) Deliver(msgs []paxos.Message) {
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

func (h *Host) send(msgs []paxos.Message) {
	if h.tr != nil {
		h.tr.Send(msgs)
	}
}

// Replica returns this node's replica of group id, or nil.
func (h *Host) Replica(id paxos.GroupID) *Replica { return (*h.groups.Load())[id] }

// AddReplica opens this node's replica of Paxos group cfg.Core.Group from
// the store, loads sm and adds the replica to the host's loop.
func (h *Host) AddReplica(cfg ReplicaConfig, sm paxos.StateMachine) (*Replica, error) {
	cfg.Core.ID = h.cfg.Self
	if cfg.KeepLog == 0 {
		cfg.KeepLog = 20000
	}
	if cfg.SnapshotChunk <= 0 {
		cfg.SnapshotChunk = 1 << 20
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = DefaultCheckpointEvery
	}
	// A restarted replica may hold entries up to a checkpoint interval
	// above the committed instance it reloads; a candidate's recovery
	// window (twice MaxInstanceAhead) must cover it with room to spare.
	if cfg.Core.MaxInstanceAhead == 0 {
		cfg.Core.MaxInstanceAhead = max(paxos.DefaultMaxInstanceAhead, 4*cfg.CheckpointEvery)
	}
	cfg.Core.EnsureDefaults()
	id := cfg.Core.Group
	if cfg.Core.MaxInstanceAhead < 2*cfg.CheckpointEvery {
		return nil, fmt.Errorf("paxos: group %d: max instance ahead %d below twice the checkpoint interval %d", id, cfg.Core.MaxInstanceAhead, cfg.CheckpointEvery)
	}
	if err := h.storageFailure(); err != nil {
		return nil, fmt.Errorf("paxos: group %d: %w", id, err)
	}
	// The core's tick 0 is the next tick of the host's clock, so that
	// every group is ticked at the same moments and heartbeats in step
	// with the others (paxos.Config.TickPhase). Its first tick is a whole one.
	phase := uint64(h.clock.Now().Sub(h.base)/h.cfg.Tick) + 1
	base := h.base.Add(time.Duration(phase) * h.cfg.Tick)
	cfg.Core.TickPhase = phase
	st := h.cfg.Store
	gs, err := st.LoadGroup(id)
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d: %w", id, err)
	}
	init := paxos.InitState{Hard: gs.Hard, LogStart: gs.LogStart, Applied: gs.Applied}
	if gs.Restoring {
		// A snapshot install was cut short: the state machine's keyspace
		// is incomplete. Start empty and fetch a snapshot again.
		h.cfg.Logger.Warn("paxos: interrupted snapshot install; refetching", "group", id)
		init.NeedSnapshot = true
	}
	if cfg.Join && gs.Hard == (paxos.HardState{}) && gs.Applied == 0 && gs.Last == 0 {
		joinGroup(&init, cfg.Core.Peers)
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
		if init.Membership, err = loadMembership(st.SMReader(id)); err != nil {
			return nil, fmt.Errorf("paxos: group %d: load member set: %w", id, err)
		}
	}
	core, err := paxos.NewCore(cfg.Core, init, replicaLog{st, id})
	if err != nil {
		return nil, err
	}
	g := &Replica{
		id:      id,
		host:    h,
		core:    core,
		sm:      sm,
		cfg:     cfg,
		log:     h.cfg.Logger,
		store:   st,
		tags:    make(map[uint64]tagged),
		streams: make(map[paxos.NodeID]chan uint64),
		base:    base,

		checkpointed: gs.Applied,
	}
	g.initMembership(init)
	if err := g.recordInitialMembership(); err != nil {
		return nil, err
	}
	g.ckpt, _ = sm.(paxos.Checkpointer)
	g.publish()
	g.touched = true // the loop's first pass computes its wake time
	if err := h.register(g); err != nil {
		return nil, err
	}
	h.signal()
	return g, nil
}

// register adds g to the groups the loop drives and Deliver routes to.
func (h *Host) register(g *Replica) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.groups.Load()
	if _, dup := old[g.id]; dup {
		return fmt.Errorf("paxos: group %d added twice", g.id)
	}
	next := make(map[paxos.GroupID]*Replica, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[g.id] = g
	h.groups.Store(&next)
	list := make([]*Replica, 0, len(next))
	for _, x := range next {
		list = append(list, x)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	h.list.Store(&list)
	return nil
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
	signal := h.signal
	var timer clock.Timer // calls signal at wakeAt; nil until a core waits for a tick
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var wakeAt time.Time // when timer fires
	for range h.wake {
		select {
		case <-h.stop:
			h.finish()
			return
		default:
		}
		groups := *h.list.Load()
		now := h.clock.Now()
		for _, g := range groups {
			g.drain(now)
		}
		h.readyRound(groups, now)
		var next time.Time
		for _, g := range groups {
			// A core changes only in drain and readyRound, which mark
			// the group: the others' status and next tick stand.
			if g.touched {
				g.touched = false
				g.publish()
				g.wake = g.wakeAt()
			}
			if g.isClosed() {
				continue
			}
			if next.IsZero() || g.wake.Before(next) {
				next = g.wake
			}
		}
		if err := h.storageFailure(); err != nil && !h.stoppedOnError {
			h.failStorage(err)
		}
		if !next.IsZero() && !next.Equal(wakeAt) {
			wakeAt = next
			if timer != nil {
				timer.Stop()
			}
			timer = h.clock.AfterFunc(next.Sub(h.clock.Now()), signal)
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
func (h *Host) readyRound(groups []*Replica, start time.Time) {
	obs := h.cfg.Observer
	for !h.stoppedOnError {
		items := h.items[:0]
		for _, g := range groups {
			if g.isClosed() || !g.core.HasReady() {
				continue
			}
			g.touched = true
			items = append(items, readyItem{g: g, rd: g.core.Ready()})
		}
		h.items = items
		if len(items) == 0 {
			return
		}
		b := h.batchForRound()
		reqs, after := h.reqs[:0], h.after[:0]
		progress, sync := false, false
		applied := 0
		for i := range items {
			g, rd := items[i].g, &items[i].rd
			if !rd.Empty() {
				progress = true
			}
			if rd.SoftChanged {
				g.publish()
				if mo, ok := g.sm.(paxos.MasterObserver); ok {
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
				applied += len(rd.Apply)
				res := g.apply(b, rd.Apply)
				g.answer(rd.Apply, res)
				clear(res)
			}
			g.resolveFailed(rd.Failed)
			reqs = append(reqs, rd.Messages...)
			after = append(after, rd.MessagesAfterSync...)
			g.core.Advance(*rd)
			if invariants.Enabled {
				g.core.AssertInvariants("Advance")
			}
		}
		if obs != nil && applied > 0 {
			obs.RoundApplied(applied, h.clock.Now().Sub(start))
		}
		if len(reqs) > 0 {
			h.send(reqs)
		}
		// Streams start once the LearnReplies that announce them left, so
		// that their first chunk finds the receiver expecting it.
		for i := range items {
			for _, p := range items[i].rd.SendSnapshot {
				items[i].g.startStream(p)
			}
		}
		ok := h.commitRound(b, sync, after)
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
func (h *Host) batchForRound() paxos.Batch {
	select {
	case b := <-h.free:
		return b
	default:
		return h.cfg.Store.NewBatch()
	}
}

// commitRound applies b (without waiting for its fsync) and queues it, with
// the messages that wait for it, to the sync goroutine. A round whose
// writes need no durability (no Ready's NeedsSync: applies, which a
// replica that loses them applies again from the log, and a non-voter's
// write-only entries, which no message vouches for before a later synced
// round made them durable) is committed without a sync of its own; its
// messages, like those of a round that wrote nothing, still queue: they
// must wait for the earlier rounds' fsyncs. That halves the fsyncs per
// command (a master's apply round and a follower's learn round wrote
// synced batches too). It reports false when storage failed.
func (h *Host) commitRound(b paxos.Batch, sync bool, after []paxos.Message) bool {
	var at time.Time // when a synced batch was written, for the Observer
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
		if h.cfg.Observer != nil {
			at = h.clock.Now()
		}
		if err := b.Apply(); err != nil {
			h.recycle(b)
			h.failStorage(err)
			return false
		}
	}
	if b == nil && len(after) == 0 {
		return true
	}
	if b == nil && h.queued.Load() == 0 {
		// Nothing to wait for: the earlier rounds' fsyncs are done and
		// their messages sent (the sync goroutine counts a round down only
		// after both). Sending here saves the trip through the sync
		// goroutine, which is most of an idle node's heartbeat acks.
		if h.storageFailure() == nil {
			h.self = h.sendAfter(after, h.self)
		}
		return true
	}
	h.queued.Add(1)
	h.syncs <- pendingSync{b: b, after: slices.Clone(after), at: at}
	return true
}

func (h *Host) recycle(b paxos.Batch) {
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
	var self []paxos.Message
	for p := range h.syncs {
		if p.b != nil {
			err := p.b.SyncWait()
			if err != nil {
				h.signal()
			} else if obs := h.cfg.Observer; obs != nil && !p.at.IsZero() {
				obs.Synced(h.clock.Now().Sub(p.at))
			}
			h.recycle(p.b)
		}
		if len(p.after) > 0 && h.storageFailure() == nil {
			self = h.sendAfter(p.after, self)
		}
		h.queued.Add(-1)
	}
}

// sendAfter sends a round's after-sync messages once its fsync (and every
// earlier one) is done; those for this node go straight to their groups.
// It reorders msgs in place and returns self, the scratch slice for this
// node's messages, for reuse.
func (h *Host) sendAfter(msgs []paxos.Message, self []paxos.Message) []paxos.Message {
	out := msgs[:0]
	self = self[:0]
	for _, m := range msgs {
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
	clear(self)
	return self[:0]
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
		if serr := h.cfg.Store.Err(); serr != nil {
			err = serr // the failure the storage latched first
		}
	}
	stop := fmt.Errorf("%w: %w", paxos.ErrStopped, err)
	h.stopErr.Store(&stop)
	groups := *h.list.Load()
	h.cfg.Logger.Warn("paxos: stopped every group after a storage failure", "groups", len(groups), "err", err)
	for _, g := range groups {
		g.stopOnStorage(stop)
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
		g.closed.Store(true)
		g.mu.Unlock()
		g.core.Flush(paxos.ErrStopped)
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
