// This file is the read-write lock: RWMutex and its two sides.

package client

import (
	"context"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// RWMutex is a handle on a read-write lock: many readers or one writer,
// with waiting writers preferred over new readers. Its two sides are
// Mutex handles of the same owner (Reader and Writer); each side is
// reentrant on its own. Holding one side while taking the other is
// refused with an error wrapping ErrInvalid; Downgrade turns a held write
// lock into a read lock atomically (there is no upgrade: two readers that
// both upgraded would wait for each other).
type RWMutex struct {
	r, w *Mutex
}

// RWMutex returns a handle on the read-write lock key. It sends nothing.
func (c *Client) RWMutex(key string, opts ...Option) *RWMutex {
	o := buildOptions(opts)
	owner := c.newOwner(o)
	r := c.newMutex(key, wire.KindRead, owner, o)
	w := c.newMutex(key, wire.KindWrite, owner, o)
	r.other, w.other = w, r
	return &RWMutex{r: r, w: w}
}

// Reader returns the read side as a Mutex (its Lock is RLock).
func (rw *RWMutex) Reader() *Mutex {
	if rw == nil {
		return nil
	}
	return rw.r
}

// Writer returns the write side as a Mutex (its Lock is Lock).
func (rw *RWMutex) Writer() *Mutex {
	if rw == nil {
		return nil
	}
	return rw.w
}

// RLock takes the lock for reading, waiting like Mutex.Lock.
func (rw *RWMutex) RLock(ctx context.Context) error { return rw.Reader().Lock(ctx) }

// TryRLock takes the lock for reading if that is possible at once, like
// Mutex.TryLock.
func (rw *RWMutex) TryRLock(ctx context.Context) error { return rw.Reader().TryLock(ctx) }

// RUnlock undoes one RLock.
func (rw *RWMutex) RUnlock(ctx context.Context) error { return rw.Reader().Unlock(ctx) }

// Lock takes the lock for writing, waiting like Mutex.Lock.
func (rw *RWMutex) Lock(ctx context.Context) error { return rw.Writer().Lock(ctx) }

// TryLock takes the lock for writing if it is free, like Mutex.TryLock.
func (rw *RWMutex) TryLock(ctx context.Context) error { return rw.Writer().TryLock(ctx) }

// Unlock undoes one Lock.
func (rw *RWMutex) Unlock(ctx context.Context) error { return rw.Writer().Unlock(ctx) }

// Downgrade turns the write lock the handle holds into a read lock,
// atomically: no other writer can take the key in between (Redisson's and
// Curator's read-write locks allow the same). The fencing token stays the
// same and the TTL is refreshed; queued readers may be granted at once,
// waiting writers stay queued behind the read lock. Afterwards the handle
// holds the read side once (RUnlock releases it) and the write side not at
// all; Lost, Token and auto-renewal carry over.
//
// The write side must be held exactly once and the read side not at all,
// else an error wrapping ErrNotHeld (not held) or ErrInvalid (held more
// than once: Unlock down to one first). A lost lock returns ErrLockLost.
// If the outcome is unknown (the connection broke), the handle still
// holds the write side and Downgrade may be called again: the server
// treats a repeated downgrade as done.
func (rw *RWMutex) Downgrade(ctx context.Context) error {
	w, r := rw.Writer(), rw.Reader()
	if err := w.check(); err != nil {
		return err
	}
	wlc, err := w.enter(ctx)
	if err != nil {
		return w.wrap("downgrade", err)
	}
	defer w.leave(wlc)
	rlc, err := r.enter(ctx)
	if err != nil {
		return w.wrap("downgrade", err)
	}
	defer r.leave(rlc)
	wlc.mu.Lock()
	n, h := wlc.count, wlc.h
	wlc.mu.Unlock()
	rlc.mu.Lock()
	rn := rlc.count
	rlc.mu.Unlock()
	switch {
	case n == 0:
		return w.wrap("downgrade", ErrNotHeld)
	case n > 1:
		return invalid("%q: downgrade of a write lock held %d times (Unlock down to once first)", w.key, n)
	case rn > 0:
		return invalid("%q: downgrade while the read side is held too", w.key)
	}
	if err := h.lostErr(); err != nil {
		return err
	}
	h.renewMu.Lock()
	defer h.renewMu.Unlock()
	h.mu.Lock()
	ttl, known := h.reqTTL, h.ttl
	from := time.Now()
	h.beginRenewLocked(from, ttl)
	h.mu.Unlock()
	res, err := w.c.do(ctx, "downgrade", w.key, wlc.hash, wire.TypeAcquire,
		&wire.Acquire{Key: w.key, Owner: wlc.owner, Kind: wire.KindRead, Flags: wire.FlagDowngrade, Weight: wire.DefaultWeight, TTLMs: ttlMs(ttl)})
	if err != nil {
		return err
	}
	if err := h.applyRenewal("downgrade", from, ttl, known, res.resp); err != nil {
		return err
	}
	wlc.mu.Lock()
	wlc.count, wlc.h = 0, nil
	wlc.mu.Unlock()
	rlc.mu.Lock()
	rlc.count, rlc.h = 1, h
	rlc.mu.Unlock()
	// The write side is no longer held: its local waiters go on.
	w.c.passLocal(wlc)
	return nil
}
