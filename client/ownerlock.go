// This file is one owner's lock on one key and kind, in one piece: its
// state (operation slot, reentrancy count, current hold), how Lock and
// TryLock acquire it (the Acquire requests, the waiter queued on the
// server and the push that ends it, the confirmation of a late grant),
// and the clean-ups of a wait or a grant its Lock call gave up.

package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// lockKey names one lock of an owner: a key, taken in one kind.
type lockKey struct {
	key  string
	kind wire.Kind
}

// ownerLock is the state of one owner's lock on one key and kind: the
// operation slot (one Lock, Unlock or Renew at a time), the reentrancy
// count and the current hold, and the waiters of its blocking acquires
// (newWaiter). A handle has its own; the ProcessOwner handles of a key
// and kind share one, kept in the client's map while in use or held.
type ownerLock struct {
	c      *Client
	key    string
	hash   uint64
	kind   wire.Kind
	owner  wire.Owner
	shared bool
	refs   int           // guarded by Client.mu; shared cores only
	slot   chan struct{} // cap 1: one operation at a time

	mu    sync.Mutex
	count int
	h     *hold

	lq *localQueue // the local queue it is active in; guarded by Client.lqMu
}

func newOwnerLock(c *Client, key string, hash uint64, kind wire.Kind, owner wire.Owner, shared bool) *ownerLock {
	return &ownerLock{c: c, key: key, hash: hash, kind: kind, owner: owner, shared: shared, slot: make(chan struct{}, 1)}
}

func (lc *ownerLock) take(ctx context.Context) error {
	select {
	case lc.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-lc.c.stopFor(ctx):
		return ErrClosed
	}
}

func (lc *ownerLock) give() { <-lc.slot }

// refOwnerLock returns the shared core for k, creating it, with a reference.
func (c *Client) refOwnerLock(k lockKey, m *Mutex) *ownerLock {
	c.mu.Lock()
	defer c.mu.Unlock()
	lc := c.procLocks[k]
	if lc == nil {
		lc = newOwnerLock(c, k.key, m.hash, k.kind, m.owner, true)
		c.procLocks[k] = lc
	}
	lc.refs++
	return lc
}

// unrefOwnerLock drops a reference to a shared core and forgets the core when
// nobody uses or holds it.
func (c *Client) unrefOwnerLock(lc *ownerLock) {
	if lc == nil || !lc.shared {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lc.refs--
	if lc.refs > 0 {
		return
	}
	lc.mu.Lock()
	idle := lc.count == 0
	lc.mu.Unlock()
	k := lockKey{key: lc.key, kind: lc.kind}
	if idle && c.procLocks[k] == lc {
		delete(c.procLocks, k)
	}
}

func (lc *ownerLock) sendRelease(ctx context.Context, token uint64) (result, error) {
	return lc.c.do(ctx, "unlock", lc.key, lc.hash, wire.TypeRelease,
		&wire.Release{Key: lc.key, Owner: lc.owner, Token: token})
}

// abandon runs, in the background and holding the core's slot, after a
// blocking Lock gave up while its request may be queued: it leaves the
// queue and releases the lock if the grant won the race. If the server
// cannot be asked, the wait stays registered as abandoned so that a late
// grant is released when it arrives.
func (lc *ownerLock) abandon(w *waiter) {
	c := lc.c
	ctx, cancel := context.WithTimeout(c.ctx, 2*c.cfg.RequestTimeout)
	defer cancel()
	res, err := c.do(ctx, "cancel", lc.key, lc.hash, wire.TypeCancelWait,
		&wire.CancelWait{Key: lc.key, Owner: lc.owner, WaitID: w.id})
	if err == nil && res.resp.Status == wire.StatusSuccess {
		tok := res.resp.Token
		c.removeWaiter(w)
		if g, ok := w.take(); ok && g.status == wire.StatusSuccess && tok == 0 {
			tok = g.token
		}
		if tok != 0 {
			lc.releaseStray(ctx, tok)
		}
		return
	}
	if g, ok := w.take(); ok && g.status == wire.StatusSuccess {
		c.removeWaiter(w)
		lc.releaseStray(ctx, g.token)
		return
	}
	c.mu.Lock()
	if _, ok := c.waits[w.id]; ok {
		w.abandoned = true
	}
	c.mu.Unlock()
	c.log.Debug("paxlock: could not leave the queue; a late grant will be released",
		"key", lc.key, "wait", w.id, "err", err)
}

// leaveAtClose is Close's clean-up of a blocking acquire registered when
// Close started: unless its Lock call or a background clean-up dealt with
// it meanwhile, it leaves the server's queue and releases the lock if the
// grant won the race. ctx is Close's (internal, bounded).
func (lc *ownerLock) leaveAtClose(ctx context.Context, w *waiter) {
	c := lc.c
	// The slot: a Lock call that was granted just before Close holds it
	// until its hold is recorded, and a background abandon until it is
	// done; either way the wait is then no longer registered.
	if lc.take(ctx) != nil {
		return
	}
	defer lc.give()
	c.mu.Lock()
	_, ok := c.waits[w.id]
	c.mu.Unlock()
	if !ok {
		return
	}
	defer c.removeWaiter(w)
	var tok uint64
	res, err := c.do(ctx, "cancel", lc.key, lc.hash, wire.TypeCancelWait,
		&wire.CancelWait{Key: lc.key, Owner: lc.owner, WaitID: w.id})
	if err == nil && res.resp.Status == wire.StatusSuccess {
		tok = res.resp.Token
	}
	if g, ok := w.take(); ok && g.status == wire.StatusSuccess && tok == 0 {
		tok = g.token
	}
	if tok != 0 {
		lc.releaseStray(ctx, tok)
	}
}

// cleanup makes sure a try-lock whose outcome is unknown left nothing held.
// CancelWait with a fresh wait id removes nothing but reports the owner's
// token if it holds the key.
func (lc *ownerLock) cleanup(token uint64) {
	c := lc.c
	ctx, cancel := context.WithTimeout(c.ctx, 2*c.cfg.RequestTimeout)
	defer cancel()
	if token == 0 {
		res, err := c.do(ctx, "cancel", lc.key, lc.hash, wire.TypeCancelWait,
			&wire.CancelWait{Key: lc.key, Owner: lc.owner, WaitID: c.nextWait.Add(1)})
		if err != nil || res.resp.Status != wire.StatusSuccess {
			return
		}
		token = res.resp.Token
	}
	if token != 0 {
		lc.releaseStray(ctx, token)
	}
}

// releaseOrphan releases a lock granted to a wait its Lock call abandoned,
// unless the handle has since taken the lock legitimately (a reacquire
// keeps the token).
func (lc *ownerLock) releaseOrphan(w *waiter, token uint64) {
	c := lc.c
	defer c.unrefOwnerLock(lc)
	ctx, cancel := context.WithTimeout(c.ctx, 2*c.cfg.RequestTimeout)
	defer cancel()
	if lc.take(ctx) != nil {
		return
	}
	defer lc.give()
	lc.releaseStray(ctx, token)
}

// releaseStray releases token unless the core holds it; the caller holds
// the core's slot.
func (lc *ownerLock) releaseStray(ctx context.Context, token uint64) {
	lc.mu.Lock()
	held := lc.count > 0 && lc.h != nil && lc.h.token == token
	lc.mu.Unlock()
	if held {
		return
	}
	res, err := lc.sendRelease(ctx, token)
	if err != nil {
		lc.c.log.Debug("paxlock: releasing an abandoned grant failed; it will expire", "key", lc.key, "token", token, "err", err)
		return
	}
	lc.c.log.Debug("paxlock: released an abandoned grant", "key", lc.key, "token", token, "status", res.resp.Status)
}

// waiter is one blocking acquire of an owner's lock, queued on the
// server and found by its WaitID when the Granted push arrives. It
// outlives its Lock call when that call gave up but could not leave the
// queue (abandoned), so that a late grant is released.
type waiter struct {
	id     uint64
	state  *ownerLock
	hash   uint64
	ch     chan waitOutcome // cap 1: the outcome
	resend chan struct{}    // cap 1: re-send the Acquire
	// Guarded by Client.mu:
	conn      *conn  // where the last LOCK_WAIT came from
	master    string // the master that queued it (conn's address unless relayed)
	abandoned bool   // its Lock call gave up but could not leave the queue
}

// newWaiter makes the waiter of a blocking acquire of lc, with a new
// WaitID.
func (lc *ownerLock) newWaiter() *waiter {
	return &waiter{
		id:     lc.c.nextWait.Add(1),
		state:  lc,
		hash:   lc.hash,
		ch:     make(chan waitOutcome, 1),
		resend: make(chan struct{}, 1),
	}
}

// waitOutcome is what ends a wait, as the Granted push tells it: SUCCESS
// with the token and the TTL the master applied, or why the wait left the
// queue. It is not yet a hold: acquireBlocking turns a SUCCESS into an
// acquired, which confirmQueued may still have to confirm.
type waitOutcome struct {
	status wire.Status
	token  uint64
	ttlMs  uint32 // the TTL the master applied; 0 if the server did not say
}

func (w *waiter) signalResend() {
	select {
	case w.resend <- struct{}{}:
	default:
	}
}

// deliver hands the outcome over without blocking; a SUCCESS is never
// replaced by a later, stale outcome.
func (w *waiter) deliver(g waitOutcome) {
	for {
		select {
		case w.ch <- g:
			return
		default:
		}
		select {
		case old := <-w.ch:
			if old.status == wire.StatusSuccess {
				g = old
			}
		default:
		}
	}
}

func (w *waiter) take() (waitOutcome, bool) {
	select {
	case g := <-w.ch:
		return g, true
	default:
		return waitOutcome{}, false
	}
}

func (c *Client) addWaiter(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.waits[w.id] = w
	if w.state.shared {
		w.state.refs++
	}
	return true
}

func (c *Client) removeWaiter(w *waiter) {
	c.mu.Lock()
	_, ok := c.waits[w.id]
	delete(c.waits, w.id)
	c.mu.Unlock()
	if ok {
		c.unrefOwnerLock(w.state)
	}
}

func (c *Client) setWaiterConn(w *waiter, cn *conn, master string) {
	c.mu.Lock()
	w.conn, w.master = cn, master
	c.mu.Unlock()
}

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
		MaxHoldMs:   maxHoldMs(m.opts.maxHold),
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
