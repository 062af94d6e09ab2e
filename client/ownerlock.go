// This file is the per-owner lock state: one owner's lock on one key and
// kind (its operation slot, reentrancy count and current hold), the
// waiter of its blocking acquire queued on the server and the pushes that
// end it, and the clean-ups of a wait or a grant its Lock call gave up.

package client

import (
	"context"
	"sync"

	"github.com/paxlock/paxlock/wire"
)

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
