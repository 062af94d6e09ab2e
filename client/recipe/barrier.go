// This file is the barrier: Barrier, held by one process while others
// wait for its release.

package recipe

import (
	"context"
	"fmt"

	"github.com/paxlock/paxlock/client"
)

// Barrier is a barrier (Curator's DistributedBarrier): while one process
// holds it, Wait blocks in every other; Release lets them all through.
//
// It is the exclusive lock name: Hold takes it (auto-renewed), Release
// frees it, and Wait returns once the lock is free, woken by a watch of
// the key.
//
// Failure semantics. The barrier is leased: if its holder closes its
// client, or dies and stops renewing, the barrier opens (at once, or when
// its TTL passes) and the waiters go on: it fails open, and a holder
// that must know sees Lost. A master change is transparent to the holder
// (the lock is replicated) and to the waiters (their watch is registered
// again; a release made meanwhile is reported by the new master).
type Barrier struct {
	c    *client.Client
	name string
	m    *client.Mutex
	err  error
}

// NewBarrier returns a handle on the barrier name. It sends nothing; opts
// apply to the hold Hold takes (TTL, Value).
func NewBarrier(c *client.Client, name string, opts ...client.Option) *Barrier {
	if c == nil {
		return &Barrier{name: name, err: invalid("barrier %q: nil *client.Client", name)}
	}
	return &Barrier{c: c, name: name, m: c.Mutex(name, holdOptions(opts)...)}
}

// Name returns the barrier's name, its key.
func (b *Barrier) Name() string { return b.name }

// Hold sets the barrier, at once. It returns an error wrapping
// client.ErrLocked (a *client.LockedError naming the holder) when another
// handle holds it already, and nil when this handle does.
func (b *Barrier) Hold(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	if b.m.Held() {
		return nil
	}
	if err := b.m.TryLock(ctx); err != nil {
		return fmt.Errorf("recipe: barrier %q hold: %w", b.name, err)
	}
	return nil
}

// Release removes the barrier this handle holds: every Wait returns. It
// returns an error wrapping client.ErrNotHeld if the handle does not hold
// it, or client.ErrLockLost if it had been lost (it was open already).
func (b *Barrier) Release(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	if err := b.m.Unlock(ctx); err != nil {
		return fmt.Errorf("recipe: barrier %q release: %w", b.name, err)
	}
	return nil
}

// Lost returns a channel closed when the hold Hold took ends without
// Release (expired or revoked): the barrier is then open.
func (b *Barrier) Lost() <-chan struct{} {
	if b.err != nil {
		return nil
	}
	return b.m.Lost()
}

// Wait blocks until nobody holds the barrier, ctx ends (an error wrapping
// ctx.Err()) or the client closes; it returns at once when the barrier is
// not set.
func (b *Barrier) Wait(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	return waitFor(ctx, b.c, []string{b.name}, func(ctx context.Context) (bool, error) {
		st, err := b.c.State(ctx, b.name)
		return err == nil && !st.Held, err
	})
}
