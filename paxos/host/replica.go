package host

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/invariants"
	"github.com/paxlock/paxlock/paxos"
)

// ReplicaConfig configures one group on a Host.
type ReplicaConfig struct {
	Core paxos.Config
	// KeepLog is how many applied instances stay in the log behind the
	// applied instance before it is truncated (default 20000).
	KeepLog uint64
	// SnapshotChunk is the size of snapshot chunks (default 1 MiB).
	SnapshotChunk int
	// CheckpointEvery is how many applied instances a Checkpointer state
	// machine may run ahead of its last checkpoint (default
	// DefaultCheckpointEvery): the most a restart replays from the log.
	// Core.MaxInstanceAhead must be at least twice it (default: the
	// larger of paxos.DefaultMaxInstanceAhead and four times it).
	CheckpointEvery uint64
	// Join says this node is being added to a running group, with
	// Core.Peers the set that includes it: when the store holds nothing of
	// the group yet, the group starts empty and takes a snapshot from a
	// member before it applies anything or campaigns. Without Join, an
	// empty store means a group that starts from nothing with Core.Peers.
	Join bool
}

// DefaultCheckpointEvery is ReplicaConfig.CheckpointEvery's default.
const DefaultCheckpointEvery = 2048

// Replica is this node's replica of one Paxos group: it runs the group's
// Core with storage, transport and ticks, and applies chosen commands to
// the group's StateMachine. Packages paxos and host call the replicated
// unit a group (paxos.GroupID); a Replica is one node's part of it.
type Replica struct {
	id   paxos.GroupID
	host *Host
	core *paxos.Core
	sm   paxos.StateMachine
	ckpt paxos.Checkpointer // sm, when it checkpoints; nil when it writes through
	// checkpointed is the applied instance the keyspace reflects (the
	// last checkpoint's, or the last apply's without a Checkpointer).
	checkpointed uint64
	cfg          ReplicaConfig
	log          *slog.Logger
	store        paxos.Storage

	mu sync.Mutex
	// guarded by mu
	inbox   []paxos.Message
	props   []proposal
	pending int // queued proposals not yet handed to the core
	// closed is written under mu and read without it where a stale false
	// only costs a wasted step (the loop's checks).
	closed atomic.Bool
	// queued is whether inbox, props or ctrl hold anything: written
	// under mu, read by the loop without it, so that a pass skips the lock
	// of every group nothing arrived for.
	queued atomic.Bool

	// Owned by the host's loop: touched is whether the core may have
	// changed in this pass (something drained, ticks or a Ready), so that
	// only such groups republish their status; wake is the core's next
	// tick as of the last such pass (wakeAt).
	touched bool
	wake    time.Time

	// mem is the member set after the applied instance (zero: Peers, as
	// long as no change was applied), memDirty whether it changed since it
	// was last written (replica_member.go); memStatus is what Membership
	// returns, refreshed when the core's view changes (memGen).
	mem       paxos.Membership
	memDirty  bool
	memStatus atomic.Pointer[paxos.MemberStatus]
	memGen    uint64

	// status is the mastership view (replaced only when it changes);
	// committed, applied and logStart are the progress, stored every
	// round without allocating (each is current on its own; see Progress).
	status    atomic.Pointer[statusSnapshot]
	committed atomic.Uint64
	applied   atomic.Uint64
	logStart  atomic.Uint64

	// snapshot transfers, see Snapshots
	snapSent, snapSentBytes, snapInstalled, snapRecvBytes atomic.Uint64
	// refusals are the core's refusals as of the last publish, and the
	// snapshot streams this runtime refused (refusals.go).
	refusals    [paxos.NumRefuseReasons]atomic.Uint64
	refusedSeen uint64 // the core's Refused() as last published (the host's loop only)
	// refusalLogged is when the last refusal was logged (the host's loop only).
	refusalLogged time.Time

	// owned by the host's loop
	inboxSpare []paxos.Message
	propsSpare []proposal
	ctrlSpare  []func(*paxos.Core)
	tags       map[uint64]tagged
	nextTag    uint64
	results    []any
	install    *snapInstall
	ctrl       []func(*paxos.Core)
	streams    map[paxos.NodeID]chan uint64 // guarded by mu

	base      time.Time // when the core's tick 0 happened (a host tick)
	delivered uint64    // ticks handed to the core (the host's loop only)
	halted    bool      // stopped by a storage failure (host's loop only)
	// failed is the error that stopped this group alone (failStop).
	failed atomic.Pointer[error]
}

type proposal struct {
	cmd []byte
	cb  paxos.Callback
	at  int64 // when it was submitted (Host.nanotime; 0: no Observer)
}

// tagged is a proposal handed to the core, waiting for its outcome.
type tagged struct {
	cb paxos.Callback
	at int64 // proposal.at
}

type statusSnapshot struct {
	soft paxos.SoftState
	// leaseUntil is when the master's lease ends on this node's monotonic
	// clock: tick k of the core happens at base + k*tick.
	leaseUntil time.Time
}

type snapInstall struct {
	from    paxos.NodeID
	applied uint64
	next    uint64
	si      paxos.SnapshotInstall
}

func (g *Replica) signal() { g.host.signal() }

// ID returns the group's id.
func (g *Replica) ID() paxos.GroupID { return g.id }

// Status returns the replica's latest view of mastership, without waiting
// for the host's loop. Serving is true only while the master's lease
// runs on the monotonic clock now: a replica whose process was paused
// stops serving the moment it resumes, before it even processes the ticks
// it missed.
func (g *Replica) Status() paxos.SoftState {
	s := g.status.Load()
	soft := s.soft
	if soft.Serving && !g.host.clock.Now().Before(s.leaseUntil) {
		soft.Serving = false
	}
	return soft
}

// Progress returns the committed and applied instances and the log start,
// as of the host loop's latest round. The three are read one after the
// other, not as one snapshot: each is current, and applied ≤ committed
// may not hold between them while a round publishes.
func (g *Replica) Progress() (committed, applied, logStart uint64) {
	return g.committed.Load(), g.applied.Load(), g.logStart.Load()
}

// SnapshotStats counts a group's snapshot transfers since it opened.
type SnapshotStats struct {
	Sent      uint64 // streams to a lagging replica that completed
	SentBytes uint64 // chunk bytes acknowledged by the receivers
	Installed uint64 // snapshots received and installed
	RecvBytes uint64 // chunk bytes received and added to an install
}

// Snapshots returns the group's snapshot transfer counters.
func (g *Replica) Snapshots() SnapshotStats {
	return SnapshotStats{Sent: g.snapSent.Load(), SentBytes: g.snapSentBytes.Load(), Installed: g.snapInstalled.Load(), RecvBytes: g.snapRecvBytes.Load()}
}

// Submit proposes cmd without waiting; cb gets the Result exactly once.
// Errors found at once (this replica is not serving, the queue is full)
// reach cb before Submit returns.
func (g *Replica) Submit(cmd []byte, cb paxos.Callback) {
	if len(cmd)+64 > g.cfg.Core.MaxBatchBytes {
		cb(paxos.Result{Err: paxos.ErrTooLarge})
		return
	}
	if !g.Status().Serving {
		err := paxos.ErrNotMaster
		if serr := g.Err(); serr != nil {
			err = serr
		}
		cb(paxos.Result{Err: err})
		return
	}
	g.mu.Lock()
	if g.closed.Load() {
		g.mu.Unlock()
		err := paxos.ErrStopped
		if serr := g.Err(); serr != nil {
			err = serr
		}
		cb(paxos.Result{Err: err})
		return
	}
	if g.pending >= g.cfg.Core.MaxQueue {
		g.mu.Unlock()
		cb(paxos.Result{Err: paxos.ErrOverloaded})
		return
	}
	var at int64
	if g.host.cfg.Observer != nil {
		at = g.host.nanotime()
	}
	g.props = append(g.props, proposal{cmd: cmd, cb: cb, at: at})
	g.pending++
	g.queued.Store(true)
	first := len(g.props) == 1
	g.mu.Unlock()
	if first {
		g.signal()
	}
}

// Propose proposes cmd and waits until it is applied or failed, or ctx
// ends. When ctx ends first the outcome is unknown: the command may still
// be chosen.
func (g *Replica) Propose(ctx context.Context, cmd []byte) (paxos.Result, error) {
	ch := make(chan paxos.Result, 1)
	g.Submit(cmd, func(r paxos.Result) { ch <- r })
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return paxos.Result{}, fmt.Errorf("paxos: propose: %w", ctx.Err())
	}
}

// TransferTo asks the group to hand mastership to node id, if this replica
// is master.
func (g *Replica) TransferTo(id paxos.NodeID) { g.control(func(c *paxos.Core) { c.TransferTo(id) }) }

// SetPreferred sets the placement hint (0: no preference).
func (g *Replica) SetPreferred(id paxos.NodeID) {
	g.control(func(c *paxos.Core) { c.SetPreferred(id) })
}

// Drain makes this replica give up mastership for good (paxos.Core.Drain):
// a node calls it on each replica before it stops.
func (g *Replica) Drain() { g.control(func(c *paxos.Core) { c.Drain() }) }

// Undrain undoes Drain (paxos.Core.Undrain).
func (g *Replica) Undrain() { g.control(func(c *paxos.Core) { c.Undrain() }) }

// Campaign makes this replica try to become master now.
func (g *Replica) Campaign() { g.control(func(c *paxos.Core) { c.Campaign() }) }

func (g *Replica) control(f func(*paxos.Core)) {
	g.mu.Lock()
	g.ctrl = append(g.ctrl, f)
	g.queued.Store(true)
	g.mu.Unlock()
	g.signal()
}

func (g *Replica) deliver(msgs []paxos.Message) {
	g.mu.Lock()
	if len(g.inbox) > 1<<16 || g.closed.Load() {
		g.mu.Unlock()
		return // overloaded: Paxos tolerates loss
	}
	g.inbox = append(g.inbox, msgs...)
	g.queued.Store(true)
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
func (g *Replica) dueTicks(now time.Time) int {
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
func (g *Replica) wakeAt() time.Time {
	return g.base.Add(time.Duration(g.core.NextTick()) * g.host.cfg.Tick)
}

// drain moves what arrived for the group into its core: controls, the
// ticks due by now, messages (snapshot chunks go to the runtime) and
// proposals. The ticks go first among what the core decides on, so that
// its clock is current when it judges a message or proposal by its
// leases. Only the host's loop calls it.
func (g *Replica) drain(now time.Time) {
	if g.closed.Load() {
		return
	}
	var inbox []paxos.Message
	var props []proposal
	var ctrl []func(*paxos.Core)
	swapped := g.queued.Load()
	if swapped {
		g.mu.Lock()
		if g.closed.Load() {
			g.mu.Unlock()
			return
		}
		inbox, props, ctrl = g.inbox, g.props, g.ctrl
		g.inbox, g.props, g.ctrl = g.inboxSpare[:0], g.propsSpare[:0], g.ctrlSpare[:0]
		g.pending -= len(props)
		g.queued.Store(false)
		g.mu.Unlock()
	}
	ticks := g.dueTicks(now)
	if !swapped && ticks == 0 {
		return
	}
	g.touched = true

	for _, f := range ctrl {
		f(g.core)
	}
	for range ticks {
		g.core.Tick()
	}
	for i := range inbox {
		m := &inbox[i]
		if m.Type == paxos.MsgSnapshot {
			g.onSnapshotMsg(m)
			continue
		}
		g.core.Step(*m)
	}
	for i := range props {
		p := &props[i]
		g.nextTag++
		if err := g.core.Propose(p.cmd, g.nextTag); err != nil {
			p.cb(paxos.Result{Err: err})
			continue
		}
		g.tags[g.nextTag] = tagged{cb: p.cb, at: p.at}
	}
	if invariants.Enabled {
		g.core.AssertInvariants("drain")
	}
	if !swapped {
		return // only ticks
	}
	clear(inbox)
	clear(props)
	clear(ctrl)
	g.inboxSpare, g.propsSpare, g.ctrlSpare = inbox, props, ctrl
}

// apply runs the chosen instances through the state machine, writing into
// b, and returns the results, one per command in order.
func (g *Replica) apply(b paxos.Batch, apply []paxos.Applied) []any {
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
	obs := g.host.cfg.Observer
	for i := range apply {
		a := &apply[i]
		n := len(a.Value.Cmds)
		if n > 0 {
			g.sm.Apply(a.Instance, a.Value.Cmds, smw, res[off:off+n])
		}
		g.foldApplied(a)
		off += n
		if obs != nil {
			obs.InstanceApplied(n)
		}
	}
	last := apply[len(apply)-1].Instance
	switch {
	case g.ckpt == nil:
		b.SetApplied(g.id, last)
		g.writeMembership(b)
		g.checkpointed = last
	case last-g.checkpointed >= g.cfg.CheckpointEvery || g.ckpt.CheckpointDue():
		g.checkpoint(b, last)
	}
	return res
}

// checkpoint writes a Checkpointer's changes and the applied instance
// they bring the keyspace to into b.
func (g *Replica) checkpoint(b paxos.Batch, applied uint64) {
	g.ckpt.Checkpoint(b.SM(g.id))
	b.SetApplied(g.id, applied)
	g.writeMembership(b)
	g.checkpointed = applied
}

// answer hands each proposer of this replica its command's result.
func (g *Replica) answer(apply []paxos.Applied, res []any) {
	off := 0
	for _, a := range apply {
		if a.Value.Change != nil {
			// A membership change: no commands, its proposer's tag.
			for _, tag := range a.Tags {
				if t, ok := g.tags[tag]; ok {
					delete(g.tags, tag)
					t.cb(paxos.Result{Instance: a.Instance})
				}
			}
			continue
		}
		for i, tag := range a.Tags {
			if t, ok := g.tags[tag]; ok {
				delete(g.tags, tag)
				g.observeProposal(t.at, true)
				t.cb(paxos.Result{Instance: a.Instance, Index: i, Value: res[off+i]})
			}
		}
		off += len(a.Value.Cmds)
	}
}

func (g *Replica) isClosed() bool { return g.closed.Load() }

func (g *Replica) handleReadyFinal() {
	g.resolveFailed(g.core.Ready().Failed)
	g.failAll(paxos.ErrStopped)
}

// resolveFailed tells the proposers of failed commands.
func (g *Replica) resolveFailed(fs []paxos.Failed) {
	for _, f := range fs {
		for _, tag := range f.Tags {
			if t, ok := g.tags[tag]; ok {
				delete(g.tags, tag)
				g.observeProposal(t.at, false)
				t.cb(paxos.Result{Err: f.Err})
			}
		}
	}
}

// observeProposal tells the Observer of a proposal's outcome (chosen, or
// failed when ok is false); at is when it was submitted.
func (g *Replica) observeProposal(at int64, ok bool) {
	if obs := g.host.cfg.Observer; obs != nil && at != 0 {
		obs.Proposed(time.Duration(g.host.nanotime()-at), ok)
	}
}

// failAll fails every command of the group with err: those its core
// holds (which may be in an accepted instance, and so may still be chosen
// through another master) with ErrOutcomeUnknown wrapping err, those not
// yet handed to the core with err alone.
func (g *Replica) failAll(err error) {
	if len(g.tags) > 0 {
		inDoubt := fmt.Errorf("%w: %w", paxos.ErrOutcomeUnknown, err)
		for tag, t := range g.tags {
			delete(g.tags, tag)
			t.cb(paxos.Result{Err: inDoubt})
		}
	}
	g.mu.Lock()
	props := g.props
	g.props = nil
	g.mu.Unlock()
	for _, p := range props {
		p.cb(paxos.Result{Err: err})
	}
}

func (g *Replica) publish() {
	if g.halted {
		return
	}
	var until time.Time
	if exp := g.core.LeaseExpiry(); exp > 0 {
		until = g.base.Add(time.Duration(exp) * g.host.cfg.Tick)
	}
	g.committed.Store(g.core.Committed())
	g.applied.Store(g.core.AppliedIndex())
	g.logStart.Store(g.core.LogStart())
	g.publishMembership()
	g.publishRefusals()
	// Mastership changes rarely (an election, a hand-off, a lease renewed
	// by a heartbeat round): keep the snapshot rather than allocate one per
	// group and round.
	soft := g.core.Status()
	if cur := g.status.Load(); cur != nil && cur.soft == soft && cur.leaseUntil.Equal(until) {
		return
	}
	g.status.Store(&statusSnapshot{soft: soft, leaseUntil: until})
}

func (g *Replica) maybeTruncate() {
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

// stopOnStorage closes the group after a storage failure (see failStorage).
func (g *Replica) stopOnStorage(err error) {
	g.mu.Lock()
	g.closed.Store(true)
	g.mu.Unlock()
	g.failAll(err)
	g.halted = true
	cur := g.status.Load()
	next := *cur
	next.soft, next.leaseUntil = paxos.SoftState{}, time.Time{}
	g.status.Store(&next)
	if cur.soft != next.soft {
		if mo, ok := g.sm.(paxos.MasterObserver); ok {
			mo.MasterChanged(next.soft)
		}
	}
}
