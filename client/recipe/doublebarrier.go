// This file is the double barrier: DoubleBarrier, entered and left by a
// fixed number of participants together.

package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/paxlock/paxlock/client"
)

// DoubleBarrier lets n participants start and finish a computation
// together (Curator's DistributedDoubleBarrier): Enter blocks until n
// participants have entered, Leave until all of them have left.
//
// It is a semaphore name with n permits and a read lock name+"/ready".
// Enter takes one permit (waiting in the server's queue if n are already
// in, as a participant of the next round), then waits, woken by watches,
// until all n permits are in use or ready is held, and takes a share of
// ready: the first participant to see the barrier full marks it so for
// the others, who may see it only after some of them have left. Leave
// gives its permit back, waits until no permit is in use, and releases
// its share of ready. Since ready stays held until the last participant
// has left, no participant of the round can miss that it was full.
//
// Use exactly n participants per round and one round at a time per name:
// a participant that enters while the previous round is still leaving
// may see its ready mark and pass Enter early. Participants disagreeing
// on n are told: Enter fails with an error wrapping
// client.ErrPermitsMismatch.
//
// Failure semantics. The barrier is leased, like every recipe: a
// participant whose client closes or whose process dies gives up its
// permit (at once, or when its TTL passes), so before the barrier filled
// the others wait for a replacement, and after it filled the others'
// Leave no longer waits for it. A master change is transparent: permits
// and ready are replicated, the watches are registered again, and a call
// that ran out of retries returns an error wrapping client.ErrNoMaster or
// client.ErrUnavailable; Enter and Leave may then be called again and go
// on from where they stopped.
type DoubleBarrier struct {
	c     *client.Client
	name  string
	n     int
	err   error
	sem   *client.Semaphore
	ready *client.RWMutex

	mu      sync.Mutex
	entered bool // the permit is held
	marked  bool // the share of ready is held
}

// NewDoubleBarrier returns a participant's handle on the double barrier
// name of n participants. It sends nothing; opts apply to its holds (TTL,
// Value). n below 1 or above 1<<31 makes every method return an error
// wrapping ErrInvalid.
func NewDoubleBarrier(c *client.Client, name string, n int, opts ...client.Option) *DoubleBarrier {
	b := &DoubleBarrier{c: c, name: name, n: n}
	switch {
	case c == nil:
		b.err = invalid("double barrier %q: nil *client.Client", name)
		return b
	case n < 1 || n > maxCount:
		b.err = invalid("double barrier %q: %d participants, want 1..%d", name, n, maxCount)
		return b
	}
	o := holdOptions(opts)
	b.sem = c.Semaphore(name, n, o...)
	b.ready = c.RWMutex(name+"/ready", o...)
	return b
}

// Enter joins the barrier and blocks until n participants have joined,
// ctx ends or the client closes. It fails with an error wrapping
// client.ErrInvalid when the handle has entered already.
func (b *DoubleBarrier) Enter(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.marked {
		return invalid("double barrier %q: entered already (Leave first)", b.name)
	}
	if !b.entered {
		if err := b.sem.Acquire(ctx, 1); err != nil {
			return fmt.Errorf("recipe: double barrier %q enter: %w", b.name, err)
		}
		b.entered = true
	}
	err := waitFor(ctx, b.c, []string{b.name, b.name + "/ready"}, func(ctx context.Context) (bool, error) {
		st, err := b.sem.State(ctx)
		if err != nil || st.InUse >= b.n {
			return err == nil, err
		}
		rs, err := b.c.State(ctx, b.name+"/ready")
		return err == nil && rs.Held, err
	})
	if err != nil {
		return fmt.Errorf("recipe: double barrier %q enter: %w", b.name, err)
	}
	if err := b.ready.RLock(ctx); err != nil {
		return fmt.Errorf("recipe: double barrier %q enter: %w", b.name, err)
	}
	b.marked = true
	return nil
}

// Leave leaves the barrier and blocks until every participant has left,
// ctx ends or the client closes. It fails with an error wrapping
// client.ErrNotHeld when the handle has not entered; after an Enter that
// returned an error it only gives the permit back. A permit lost while
// inside (the handle's holds expired) is reported, wrapping
// client.ErrLockLost, once the others have left.
func (b *DoubleBarrier) Leave(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.entered && !b.marked {
		return fmt.Errorf("recipe: double barrier %q leave: %w", b.name, client.ErrNotHeld)
	}
	var lost error
	if b.entered {
		err := b.sem.Release(ctx)
		switch {
		case err == nil, errors.Is(err, client.ErrNotHeld):
		case errors.Is(err, client.ErrLockLost):
			lost = err
		default:
			return fmt.Errorf("recipe: double barrier %q leave: %w", b.name, err)
		}
		b.entered = false
	}
	if !b.marked {
		return lost // an Enter that did not finish: withdrawing waits for nobody
	}
	err := waitFor(ctx, b.c, []string{b.name}, func(ctx context.Context) (bool, error) {
		st, err := b.sem.State(ctx)
		return err == nil && st.InUse == 0, err
	})
	if err != nil {
		return fmt.Errorf("recipe: double barrier %q leave: %w", b.name, err)
	}
	if err := b.ready.RUnlock(ctx); err != nil && !errors.Is(err, client.ErrLockLost) {
		return fmt.Errorf("recipe: double barrier %q leave: %w", b.name, err)
	}
	b.marked = false
	if lost != nil {
		return fmt.Errorf("recipe: double barrier %q leave: %w", b.name, lost)
	}
	return nil
}
