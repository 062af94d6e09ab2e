// This file is the lock core: one key and kind's operation slot, count and
// hold, shared by the handles of one owner, and its clean-ups.

package client

import (
	"context"
	"sync"

	"github.com/paxlock/paxlock/wire"
)

type coreKey struct {
	key  string
	kind wire.Kind
}

// lockCore is the state of one owner's lock on one key and kind: the
// reentrancy count and the current hold. A handle has its own core; the
// ProcessOwner handles of a key and kind share one, kept in the client's
// map while in use or held.
type lockCore struct {
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

func newCore(c *Client, key string, hash uint64, kind wire.Kind, owner wire.Owner, shared bool) *lockCore {
	return &lockCore{c: c, key: key, hash: hash, kind: kind, owner: owner, shared: shared, slot: make(chan struct{}, 1)}
}

func (lc *lockCore) take(ctx context.Context) error {
	select {
	case lc.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-lc.c.stopFor(ctx):
		return ErrClosed
	}
}

func (lc *lockCore) give() { <-lc.slot }

// refCore returns the shared core for k, creating it, with a reference.
func (c *Client) refCore(k coreKey, m *Mutex) *lockCore {
	c.mu.Lock()
	defer c.mu.Unlock()
	lc := c.procCores[k]
	if lc == nil {
		lc = newCore(c, k.key, m.hash, k.kind, m.owner, true)
		c.procCores[k] = lc
	}
	lc.refs++
	return lc
}

// unrefCore drops a reference to a shared core and forgets the core when
// nobody uses or holds it.
func (c *Client) unrefCore(lc *lockCore) {
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
	k := coreKey{key: lc.key, kind: lc.kind}
	if idle && c.procCores[k] == lc {
		delete(c.procCores, k)
	}
}

func (lc *lockCore) sendRelease(ctx context.Context, token uint64) (result, error) {
	return lc.c.do(ctx, "unlock", lc.key, lc.hash, wire.TypeRelease,
		&wire.Release{Key: lc.key, Owner: lc.owner, Token: token})
}

// abandon runs, in the background and holding the core's slot, after a
// blocking Lock gave up while its request may be queued: it leaves the
// queue and releases the lock if the grant won the race. If the server
// cannot be asked, the wait stays registered as abandoned so that a late
// grant is released when it arrives.
func (lc *lockCore) abandon(w *waiter) {
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
func (lc *lockCore) leaveAtClose(ctx context.Context, w *waiter) {
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
func (lc *lockCore) cleanup(token uint64) {
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
func (lc *lockCore) releaseOrphan(w *waiter, token uint64) {
	c := lc.c
	defer c.unrefCore(lc)
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
func (lc *lockCore) releaseStray(ctx context.Context, token uint64) {
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
