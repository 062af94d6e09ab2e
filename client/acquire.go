// This file is how Lock and TryLock acquire: the grant, the Acquire
// requests, the wait in the server's queue and the confirmation of a late
// grant.

package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// acquired is an acquire's success, the hold to be: the token, the
// effective TTL and the local time the TTL counts from. A queued grant
// (pushed, not answered) must go through confirmQueued before it counts
// as held. (A wait's pushed outcome, whatever its status, is a
// waitOutcome.)
type acquired struct {
	token  uint64
	ttl    time.Duration // 0: unknown (queued grant from an older server)
	from   time.Time
	queued bool
}

// stale reports whether a third of the grant's TTL or more has passed
// since the time it counts from: confirmQueued renews such a grant before
// Lock reports it held.
func (g acquired) stale() bool { return g.ttl > 0 && time.Since(g.from) >= g.ttl/3 }

// effTTL is the TTL a successful acquire or renewal asking for asked is
// counted with: the server's answer (leftMs, the TTL it applied) when it
// gives one, else known, the effective TTL known from before (0 if none),
// else asked. Never more than asked: the server may round a TTL up to
// its minimum, and counting less than it applied is safe.
func effTTL(asked time.Duration, leftMs uint32, known time.Duration) time.Duration {
	switch {
	case leftMs > 0:
		return min(asked, time.Duration(leftMs)*time.Millisecond)
	case known > 0:
		// A server answered without the TTL (a result that arrived
		// after a master change): it applied asked clamped to its
		// bounds, and the last effective TTL was within them.
		return min(asked, known)
	}
	return asked
}

func (m *Mutex) lock(ctx context.Context, block bool) error {
	if err := m.check(); err != nil {
		return err
	}
	lc, err := m.enter(ctx)
	if err != nil {
		return m.wrap("lock", err)
	}
	// handedOff: a background clean-up took over the slot and gives it
	// back itself.
	handedOff := false
	defer func() {
		if !handedOff {
			m.leave(lc)
		}
	}()
	if err := m.checkOther(); err != nil {
		return err
	}
	lc.mu.Lock()
	h, n := lc.h, lc.count
	lc.mu.Unlock()
	if n > 0 {
		// Reentrant: confirm and extend the hold, then count.
		if err := h.lostErr(); err != nil {
			return err
		}
		if err := h.renew(ctx, m.opts.ttl); err != nil {
			return err
		}
		lc.mu.Lock()
		lc.count++
		lc.mu.Unlock()
		return nil
	}
	var g acquired
	if block {
		var limit time.Time
		if m.opts.maxWait > 0 {
			limit = time.Now().Add(m.opts.maxWait)
		}
		if m.localEligible() {
			lh, active, err := m.waitLocal(ctx, lc, limit, &handedOff)
			switch {
			case err != nil:
				return err
			case lh != nil:
				lc.mu.Lock()
				lc.h, lc.count = lh, 1
				lc.mu.Unlock()
				return nil
			case active:
				// Acquire on the server; whatever way that fails, the
				// role goes on to the next local waiter.
				defer func() {
					lc.mu.Lock()
					held := lc.count > 0
					lc.mu.Unlock()
					if !held {
						m.c.passLocal(lc)
					}
				}()
			}
		}
		for {
			g, err = m.acquireBlocking(ctx, lc, limit, &handedOff)
			// A direct answer is confirmed like a queued grant when it
			// took a third of the TTL or more (its attempts spanned a
			// master change): it counts from the first send.
			if err != nil || !g.queued && !g.stale() {
				break
			}
			var again bool
			if g, again, err = m.confirmQueued(ctx, lc, g, &handedOff); !again {
				break
			}
		}
	} else {
		g, err = m.acquireTry(ctx, lc, &handedOff)
	}
	if err != nil {
		return err
	}
	h = m.c.newHold(lc, g, m.opts)
	lc.mu.Lock()
	lc.h, lc.count = h, 1
	lc.mu.Unlock()
	return nil
}

func (m *Mutex) acquireMsg(waitMs uint32, waitID uint64) *wire.Acquire {
	return &wire.Acquire{
		Key:       m.key,
		Owner:     m.owner,
		Kind:      m.kind,
		Weight:    m.opts.weight,
		TTLMs:     ttlMs(m.opts.ttl),
		MaxWaitMs: waitMs,
		WaitID:    waitID,
		Value:     m.Value(),
		Permits:   m.sem.permits(),
		Limit:     m.sem.limit(),
		// LockDelayMs is set only when the option is: 0 leaves the
		// field out of the frame.
		LockDelayMs: lockDelayMs(m.opts.lockDelay),
	}
}

func (m *Mutex) lockedErr(r *wire.Response) error {
	return &LockedError{
		Key: m.key, Holder: r.Holder, Token: r.Token, Kind: r.Kind,
		TTLLeft: time.Duration(r.TTLLeftMs) * time.Millisecond, QueueLen: int(r.QueueLen),
		Value: r.Value, Permits: int(r.Permits), InUse: int(r.InUse),
		RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond,
	}
}

func (m *Mutex) acquireTry(ctx context.Context, lc *ownerLock, handedOff *bool) (acquired, error) {
	from := time.Now()
	res, err := m.c.do(ctx, "trylock", m.key, m.hash, wire.TypeAcquire, m.acquireMsg(0, 0))
	if err != nil {
		if res.unknown && !errors.Is(err, ErrClosed) {
			// The acquire may have been granted after all: make sure it
			// is not left held, in the background, keeping the slot.
			*handedOff = m.c.goClean(func() {
				defer m.leave(lc)
				lc.cleanup(0)
			})
		}
		return acquired{}, err
	}
	r := res.resp
	switch r.Status {
	case wire.StatusSuccess:
		return acquired{token: r.Token, ttl: effTTL(m.opts.ttl, r.TTLLeftMs, 0), from: from}, nil
	case wire.StatusLockOccupied:
		return acquired{}, m.lockedErr(r)
	}
	return acquired{}, statusErr("trylock", m.key, r)
}

// acquireBlocking queues on the server and waits for the Granted push,
// re-sending the same Acquire (same WaitID) after a lost connection, a
// master change or a NO_MASTER grant.
//
// A grant pushed by the master is returned with queued set, counted from
// the send time of the wait's first Acquire (see confirmQueued).
func (m *Mutex) acquireBlocking(ctx context.Context, lc *ownerLock, limit time.Time, handedOff *bool) (acquired, error) {
	c := m.c
	w := lc.newWaiter()
	if !c.addWaiter(w) {
		return acquired{}, ErrClosed
	}
	queued := false // a registration may be live on the server
	abandon := func(cause error) (acquired, error) {
		if !queued {
			c.removeWaiter(w)
			return acquired{}, cause
		}
		if c.isClosed() {
			// Close leaves the queue for it (leaveAtClose).
			return acquired{}, cause
		}
		*handedOff = c.goClean(func() {
			defer m.leave(lc)
			lc.abandon(w)
		})
		return acquired{}, cause
	}
	// first is when the wait's first Acquire was sent. Every Acquire
	// that can have queued this wait (its WaitID is new) was sent at or
	// after it, so the master granted it after first.
	var first time.Time
	for n := 1; ; n++ {
		select {
		case <-w.resend:
		default:
		}
		wait, byCtx, ok := waitLeft(ctx, limit)
		if !ok {
			return abandon(m.timeoutErr(byCtx))
		}
		from := time.Now()
		if first.IsZero() {
			first = from
		}
		res, err := c.doWait(ctx, w, m.key, m.acquireMsg(wait, w.id), first)
		if err != nil {
			queued = queued || res.unknown
			return abandon(err)
		}
		r := res.resp
		switch r.Status {
		case wire.StatusSuccess:
			c.removeWaiter(w)
			return acquired{token: r.Token, ttl: effTTL(m.opts.ttl, r.TTLLeftMs, 0), from: from}, nil
		case wire.StatusLockWait:
			queued = true // doWait bound w to the node that queued it
		case wire.StatusLockOccupied:
			c.removeWaiter(w)
			return acquired{}, m.lockedErr(r)
		default:
			c.removeWaiter(w)
			return acquired{}, statusErr("lock", m.key, r)
		}
		select {
		case g := <-w.ch:
			if c.isClosed() {
				// Close began, and select chose between the two at
				// random: the call ends with ErrClosed whichever came
				// first, and the outcome goes back to the wait, whose
				// grant Close gives back (leaveAtClose).
				w.deliver(g)
				return acquired{}, ErrClosed
			}
			switch g.status {
			case wire.StatusSuccess:
				// The master started the TTL when it applied the grant,
				// at some time after first and before the push reached
				// us; how late the push is, nobody knows.
				c.removeWaiter(w)
				ttl := min(m.opts.ttl, time.Duration(g.ttlMs)*time.Millisecond)
				return acquired{token: g.token, ttl: ttl, from: first, queued: true}, nil
			case wire.StatusTimeout:
				c.removeWaiter(w)
				return acquired{}, m.timeoutErr(byCtx)
			case wire.StatusNoMaster, wire.StatusMoving, wire.StatusMoved:
				// Left the queue (a master change, a namespace move):
				// re-sent below, to whichever master the view names
				// (onGranted asked for a fresh one).
			default:
				c.removeWaiter(w)
				return acquired{}, fmt.Errorf("client: lock %q: grant with status %s: %w", m.key, g.status, statusSentinel(g.status))
			}
		case <-w.resend:
		case <-ctx.Done():
			return abandon(ctxErr("lock", m.key, ctx.Err(), nil))
		case <-c.done:
			// The wait stays registered: Close leaves the queue for it
			// and gives back a grant that raced (leaveAtClose).
			return acquired{}, ErrClosed
		}
		// Re-send after a short pause.
		if err := c.sleep(ctx, c.backoff(min(n, 3))); err != nil {
			if errors.Is(err, ErrClosed) {
				return acquired{}, ErrClosed // as above
			}
			return abandon(ctxErr("lock", m.key, err, nil))
		}
	}
}

// confirmQueued decides from when a queued grant counts (the rule in the
// package documentation, "Validity after a queued grant"). A grant whose
// wait began less than a third of its TTL ago counts from the wait's
// first send, with the TTL the master applied: no request is needed. An
// older grant, or one whose TTL the server did not say, is first
// confirmed with a Renew, and counts from the Renew's send. again
// reports that the grant was gone before it could be confirmed (it
// expired while its push was on the way, or the process paused): the
// caller queues anew. When the Renew cannot be made, the lock is given
// back in the background and the error returned.
func (m *Mutex) confirmQueued(ctx context.Context, lc *ownerLock, g acquired, handedOff *bool) (_ acquired, again bool, _ error) {
	if g.ttl > 0 && !g.stale() {
		g.queued = false
		return g, false, nil
	}
	c := m.c
	giveBack := func() {
		*handedOff = c.goClean(func() {
			defer m.leave(lc)
			lc.cleanup(g.token)
		})
	}
	// A confirmation that itself took a third of the TTL or more (its
	// retries spanned a master change) is confirmed again, a few times at
	// most: the grant counts from the send of the Renew that succeeded,
	// and Lock should not return a lock that is already (nearly) lost.
	for attempt := 1; ; attempt++ {
		from := time.Now()
		res, err := c.do(ctx, "lock", m.key, m.hash, wire.TypeRenew,
			&wire.Renew{Key: m.key, Owner: m.owner, Token: g.token, TTLMs: ttlMs(m.opts.ttl)})
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				giveBack()
			}
			return acquired{}, false, err
		}
		r := res.resp
		switch {
		case r.Status == wire.StatusSuccess:
			ng := acquired{token: g.token, ttl: effTTL(m.opts.ttl, r.TTLLeftMs, g.ttl), from: from}
			if attempt < maxConfirms && time.Since(from) >= ng.ttl/3 {
				g = ng
				continue
			}
			return ng, false, nil
		case lostStatus(r.Status):
			c.log.Warn("paxlock: a queued grant ended before it could be confirmed; waiting again",
				"key", m.key, "token", g.token, "status", r.Status)
			return acquired{}, true, nil
		}
		giveBack()
		return acquired{}, false, statusErr("lock", m.key, r)
	}
}

// maxConfirms bounds the Renews confirmQueued sends for one grant.
const maxConfirms = 3

func (m *Mutex) timeoutErr(byCtx bool) error {
	if byCtx {
		return fmt.Errorf("client: lock %q: %w: %w", m.key, ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("client: lock %q: %w: MaxWait %v passed", m.key, ErrTimeout, m.opts.maxWait)
}

// waitLeft computes a blocking acquire's MaxWaitMs from the MaxWait limit
// and ctx's deadline; byCtx says the deadline is the nearer one; ok is
// false when the wait has already run out.
func waitLeft(ctx context.Context, limit time.Time) (ms uint32, byCtx, ok bool) {
	var left time.Duration
	has := false
	if !limit.IsZero() {
		left, has = time.Until(limit), true
	}
	if d, dok := ctx.Deadline(); dok {
		if r := time.Until(d); !has || r < left {
			left, has, byCtx = r, true, true
		}
	}
	if !has {
		return wire.WaitForever, false, true
	}
	if left <= 0 {
		return 0, byCtx, false
	}
	return waitMs(left), byCtx, true
}
