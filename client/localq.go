package client

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// Local queueing (Config.LocalQueue turns it on).
//
// The blocking Locks of one Client's handles on the same key and kind
// (exclusive, or the write side of an RWMutex; not ProcessOwner handles)
// queue in the client. One of them at a time is active: it holds the key,
// or waits for it in the server's queue, or is being handed it. The others
// wait in the local queue and send nothing. When the active handle
// unlocks, the best local waiter (see localAging) is next: the Release
// asks the server to hand the key on to it (wire.Release.PassOnID) in the
// same Paxos command, which the server does only if nobody waits in its
// own queue for the key. The pass-on is a grant like any other: a new,
// higher fencing token, the next handle's TTL and value, its own lease,
// renewals and Lost. If the server only released (someone from another
// process is queued) the next local waiter becomes active and queues on
// the server like any Lock. The argument is in client/USAGE.md.

// localAging is the wait a unit of weight is worth in the local queue:
// the server's default weight_aging, so that local waiters are ordered as
// that server would order them.
const localAging = time.Second

// localQueue is the local queue of one key and kind. Guarded by
// Client.lqMu.
type localQueue struct {
	k       lockKey
	active  *ownerLock // the active handle's core; nil when none
	waiters []*localWaiter
	seq     uint64
}

// localWaiter is a blocking Lock waiting in a local queue.
type localWaiter struct {
	m    *Mutex
	lc   *ownerLock
	rank int64 // arrival (ns since the queue's clock origin) minus weight × localAging
	seq  uint64
	ch   chan localTurn // cap 1; written once, by whoever removed the waiter
}

// localTurn is what a local waiter is given: a hold handed on to it, or
// the active role without a hold (queue on the server).
type localTurn struct {
	h *hold
}

var localEpoch = time.Now()

// localEligible reports whether a blocking Lock of m goes through the
// local queue.
func (m *Mutex) localEligible() bool {
	return m.c.cfg.LocalQueue && m.state != nil && (m.kind == wire.KindExclusive || m.kind == wire.KindWrite)
}

// waitLocal enters the local queue of m's key. It returns with active
// true when lc has become the active handle and must acquire on the
// server; with h set when the key was handed on to it; or with an error
// (ctx, MaxWait, Close) after leaving the queue. A hold handed on while
// the wait was giving up is released in the background (handedOff: that
// clean-up keeps the slot).
func (m *Mutex) waitLocal(ctx context.Context, lc *ownerLock, limit time.Time, handedOff *bool) (h *hold, active bool, err error) {
	c := m.c
	c.lqMu.Lock()
	lq := c.localQs[lockKey{key: m.key, kind: m.kind}]
	if lq == nil {
		lq = &localQueue{k: lockKey{key: m.key, kind: m.kind}}
		c.localQs[lq.k] = lq
	}
	if lq.active == nil {
		lq.active, lc.lq = lc, lq
		c.lqMu.Unlock()
		return nil, true, nil
	}
	lq.seq++
	w := &localWaiter{
		m: m, lc: lc, seq: lq.seq, ch: make(chan localTurn, 1),
		rank: int64(time.Since(localEpoch)) - int64(m.opts.weight)*int64(localAging),
	}
	lq.waiters = append(lq.waiters, w)
	c.lqMu.Unlock()

	var timeout <-chan time.Time
	if !limit.IsZero() {
		t := time.NewTimer(time.Until(limit))
		defer t.Stop()
		timeout = t.C
	}
	var cause error
	select {
	case t := <-w.ch:
		if t.h == nil {
			return nil, true, nil
		}
		if c.isClosed() {
			// Close gives the hold back (it is in Client.holds).
			return nil, false, ErrClosed
		}
		return t.h, false, nil
	case <-ctx.Done():
		// As in the server's queue: a deadline is a timeout.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cause = m.timeoutErr(true)
		} else {
			cause = ctxErr("lock", m.key, ctx.Err(), nil)
		}
	case <-timeout:
		cause = m.timeoutErr(false)
	case <-c.done:
		cause = ErrClosed
	}
	c.lqMu.Lock()
	if i := slices.Index(lq.waiters, w); i >= 0 {
		lq.waiters = slices.Delete(lq.waiters, i, i+1)
		c.lqMu.Unlock()
		return nil, false, cause
	}
	c.lqMu.Unlock()
	// Someone removed it and is about to hand it the key or the role:
	// take that and give it on.
	t := <-w.ch
	if t.h == nil {
		c.passLocal(lc)
		return nil, false, cause
	}
	if c.isClosed() {
		return nil, false, ErrClosed // Close releases the hold
	}
	lc.mu.Lock()
	lc.h, lc.count = t.h, 1
	lc.mu.Unlock()
	*handedOff = c.goClean(func() {
		defer m.leave(lc)
		ctx, cancel := context.WithTimeout(c.ctx, 2*c.cfg.RequestTimeout)
		defer cancel()
		_ = m.unlockHeld(ctx, lc)
	})
	if !*handedOff {
		lc.mu.Lock()
		lc.h, lc.count = nil, 0
		lc.mu.Unlock()
	}
	return nil, false, cause
}

// popLocal removes the local queue's best waiter: lowest rank, then
// earliest arrival. Client.lqMu is held.
func (lq *localQueue) popLocal() *localWaiter {
	if len(lq.waiters) == 0 {
		return nil
	}
	best := 0
	for i, w := range lq.waiters {
		b := lq.waiters[best]
		if w.rank < b.rank || w.rank == b.rank && w.seq < b.seq {
			best = i
		}
	}
	w := lq.waiters[best]
	lq.waiters = slices.Delete(lq.waiters, best, best+1)
	return w
}

// takeNext ends lc's active role and returns the local waiter it goes to
// (removed from the queue; it must be given a turn), or nil when lc was not
// active or nobody waits (the queue then has no active handle).
func (c *Client) takeNext(lc *ownerLock) *localWaiter {
	c.lqMu.Lock()
	defer c.lqMu.Unlock()
	lq := lc.lq
	if lq == nil || lq.active != lc {
		return nil
	}
	lc.lq = nil
	w := lq.popLocal()
	if w == nil {
		lq.active = nil
		if c.localQs[lq.k] == lq {
			delete(c.localQs, lq.k)
		}
		return nil
	}
	lq.active, w.lc.lq = w.lc, lq
	return w
}

// passLocal gives lc's active role (if it has it) to the next local
// waiter, which then acquires on the server itself. Used when lc's Lock
// failed or gave up, and when its hold is lost or downgraded.
func (c *Client) passLocal(lc *ownerLock) {
	if w := c.takeNext(lc); w != nil {
		w.ch <- localTurn{}
	}
}

// giveHold hands w a hold granted to it by a pass-on.
func (c *Client) giveHold(w *localWaiter, g acquired) {
	h := c.newHold(w.lc, g, w.m.opts)
	w.ch <- localTurn{h: h}
}

// beginClean counts a request whose outcome Close must wait for before it
// releases the client's holds (a pass-on, whose new hold Close must see);
// false once Close has begun.
func (c *Client) beginClean() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.cleaners++
	return true
}

// endClean ends what beginClean counted.
func (c *Client) endClean() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cleaners--; c.cleaners == 0 && c.cleanIdle != nil {
		close(c.cleanIdle)
		c.cleanIdle = nil
	}
}

// passOn is Unlock of the active handle when a local waiter is next: one
// Release that asks the server to hand the key on to next. Whatever the
// outcome, next is given either a hold or the active role.
func (m *Mutex) passOn(ctx context.Context, lc *ownerLock, h *hold, next *localWaiter) error {
	c := m.c
	local, valid, lost := h.finish()
	if lost != nil {
		if local {
			_, _ = lc.sendRelease(ctx, h.token)
		}
		next.ch <- localTurn{}
		return lost
	}
	if !c.beginClean() {
		next.ch <- localTurn{}
		return ErrClosed
	}
	defer c.endClean()
	nm := next.m
	ttl := nm.opts.ttl
	// The request goes on while Close waits for it (see beginClean).
	ictx := context.WithValue(ctx, internalKey{}, true)
	from := time.Now()
	res, err := c.do(ictx, "unlock", lc.key, lc.hash, wire.TypeRelease, &wire.Release{
		Key: lc.key, Owner: lc.owner, Token: h.token,
		PassOnID: nm.owner.ID, PassOnTTLMs: ttlMs(ttl), PassOnValue: nm.Value(),
		PassOnLockDelayMs: lockDelayMs(nm.opts.lockDelay),
	})
	if err != nil {
		if res.unknown {
			// The pass-on may have been applied: ask whether next holds.
			if tok := m.probeHolder(nm); tok != 0 {
				c.giveHold(next, acquired{token: tok, ttl: ttl, from: from})
				return nil
			}
		}
		next.ch <- localTurn{}
		return err
	}
	r := res.resp
	switch {
	case r.Status == wire.StatusSuccess && r.Holder == nm.owner && r.Token != 0:
		c.giveHold(next, acquired{token: r.Token, ttl: effTTL(ttl, r.TTLLeftMs, 0), from: from})
		return nil
	case r.Status == wire.StatusSuccess:
		next.ch <- localTurn{}
		return nil
	case lostStatus(r.Status) && res.unknown && valid:
		next.ch <- localTurn{}
		return nil
	}
	next.ch <- localTurn{}
	return statusErr("unlock", m.key, r)
}

// probeHolder asks the server whether nm's owner holds its key, and
// returns its token (0: no, or no answer). CancelWait with a fresh wait id
// removes nothing and reports the owner's token.
func (m *Mutex) probeHolder(nm *Mutex) uint64 {
	c := m.c
	ctx, cancel := context.WithTimeout(context.WithValue(c.ctx, internalKey{}, true), 2*c.cfg.RequestTimeout)
	defer cancel()
	res, err := c.do(ctx, "cancel", nm.key, nm.hash, wire.TypeCancelWait,
		&wire.CancelWait{Key: nm.key, Owner: nm.owner, WaitID: c.nextWait.Add(1)})
	if err != nil || res.resp.Status != wire.StatusSuccess {
		if err != nil && !errors.Is(err, ErrClosed) {
			c.log.Debug("paxlock: could not learn the outcome of a pass-on", "key", nm.key, "err", err)
		}
		return 0
	}
	return res.resp.Token
}

// LocalWaiters returns how many blocking Locks of this client wait in its
// local queue for the exclusive lock key and for the write side of the
// read-write lock key (a diagnostic; they send nothing until their turn).
// See Config.LocalQueue.
func (c *Client) LocalWaiters(key string) int {
	if c == nil {
		return 0
	}
	c.lqMu.Lock()
	defer c.lqMu.Unlock()
	n := 0
	for _, k := range []wire.Kind{wire.KindExclusive, wire.KindWrite} {
		if lq := c.localQs[lockKey{key: key, kind: k}]; lq != nil {
			n += len(lq.waiters)
		}
	}
	return n
}
