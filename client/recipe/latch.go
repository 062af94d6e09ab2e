// This file is the count-down latch: Latch.

package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client"
)

// maxCount is the largest latch count and double-barrier size: a
// semaphore's largest total.
const maxCount = 1 << 31

// waitingSuffix makes the key of a latch's registered waiters.
const waitingSuffix = "/waiting"

// openSuffix makes the key of a latch's open mark.
const openSuffix = "/open"

// releaseTimeout bounds a release made after the caller's ctx ended.
const releaseTimeout = 10 * time.Second

// Latch is a count-down latch shared by processes (Redisson's
// RCountDownLatch, Java's CountDownLatch): Wait blocks until CountDown has
// been called count times in all, by any participants.
//
// It is a semaphore named name whose total is count: each CountDown takes
// one permit (TryAcquire, never queued) and keeps it, renewed, and the
// latch is open when all count permits are in use. The atomicity of
// concurrent CountDowns from many processes is the semaphore's: the
// group's state machine grants permits one command at a time, so count
// CountDowns take exactly count permits and a further one finds none free
// and does nothing (as on an open latch). Participants that disagree on
// count are told so: the semaphore keeps the total of its first holder,
// and a CountDown with another count fails with an error wrapping
// client.ErrPermitsMismatch.
//
// Failure semantics. A CountDown lasts as long as the handle that made it
// keeps its permit: until Close, until the client closes, or, if the
// process dies, until its TTL passes without a renewal; the count then
// goes up again. The latch is leased, not durable: once every permit is
// given back it counts from count again. So that everyone still learns
// that it opened:
//
//   - Close waits until the latch has opened, then marks it open (a share
//     of the read lock name+"/open"), gives its permit back, and keeps the
//     mark until every counter has closed and no Wait is registered. The
//     mark is taken before a permit goes and released only when all are
//     gone, so a participant of the round that looks late sees the latch
//     full or marked, never neither.
//   - Wait registers itself while it waits (a share of name+"/waiting"),
//     and returns when the latch is full or marked open.
//
// So a counter does CountDown, its work, then Close (which may wait for
// the others); every Wait that began before the last counter closed
// returns nil; a Wait that begins later waits for a new round. Use one
// round at a time per name. A dead waiter or counter holds the others'
// Close up for its TTL at most. A master change is transparent: permits
// and marks are replicated, watches are registered again by the client,
// and a CountDown whose request ran out of retries returns an error
// wrapping client.ErrNoMaster or client.ErrUnavailable; calling CountDown
// again retries the same permit (a reacquire by the same owner, never a
// second permit).
type Latch struct {
	c     *client.Client
	name  string
	count int
	opts  []client.Option
	err   error

	mu      sync.Mutex
	held    []*client.Semaphore // the handle's CountDowns, one permit each
	pending *client.Semaphore   // a CountDown whose outcome is unknown, retried first
}

// NewLatch returns a handle on the latch name that opens after count
// CountDowns. It sends nothing. opts apply to the permits CountDown takes
// (TTL, Value); a count below 1 or above 1<<31, or a bad name, makes
// every method return an error wrapping ErrInvalid.
func NewLatch(c *client.Client, name string, count int, opts ...client.Option) *Latch {
	l := &Latch{c: c, name: name, count: count, opts: holdOptions(opts)}
	switch {
	case c == nil:
		l.err = invalid("latch %q: nil *client.Client", name)
	case count < 1 || count > maxCount:
		l.err = invalid("latch %q: count %d, want 1..%d", name, count, maxCount)
	}
	return l
}

// Name returns the latch's name, its key.
func (l *Latch) Name() string { return l.name }

// CountDown counts the latch down by one, at once; on an open latch it
// does nothing and returns nil. The count stays down while the handle
// keeps the permit (see Latch). It returns an error wrapping
// client.ErrPermitsMismatch when the latch is held with another count.
func (l *Latch) CountDown(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.pending
	if s == nil {
		s = l.c.Semaphore(l.name, l.count, l.opts...)
	} else if s.Held() > 0 {
		// The failed attempt was granted after all.
		l.pending = nil
		l.held = append(l.held, s)
		return nil
	}
	err := s.TryAcquire(ctx, 1)
	switch {
	case err == nil:
		l.pending = nil
		l.held = append(l.held, s)
		return nil
	case errors.Is(err, client.ErrLocked):
		l.pending = nil
		return nil // every permit is taken: the latch is open
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrPermitsMismatch):
		l.pending = nil
		return fmt.Errorf("recipe: latch %q count down: %w", l.name, err)
	}
	l.pending = s // the outcome may be unknown: the next CountDown retries this owner
	return fmt.Errorf("recipe: latch %q count down: %w", l.name, err)
}

// Count returns how many CountDowns the latch still needs: 0 when it is
// open. It asks the master of the latch's group (no Paxos round).
func (l *Latch) Count(ctx context.Context) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	st, err := l.c.Semaphore(l.name, l.count).State(ctx)
	if err != nil {
		return 0, fmt.Errorf("recipe: latch %q count: %w", l.name, err)
	}
	if st.Permits != 0 && st.Permits != l.count {
		return 0, fmt.Errorf("recipe: latch %q: %w", l.name,
			&client.PermitsError{Key: l.name, Have: st.Permits, Want: l.count})
	}
	return max(l.count-st.InUse, 0), nil
}

// Wait blocks until the latch is open (full, or marked open by a counter's
// Close), ctx ends (an error wrapping ctx.Err()) or the client closes. It
// is woken by the server's watch pushes on the latch's keys (see the
// package documentation); an open latch returns at once. While it waits
// it is registered, so that the counters' Close waits for it.
func (l *Latch) Wait(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	reg := l.c.RWMutex(l.name+waitingSuffix, l.opts...).Reader()
	if err := reg.Lock(ctx); err != nil {
		return fmt.Errorf("recipe: latch %q wait: register: %w", l.name, err)
	}
	defer release(ctx, reg)
	return l.waitOpen(ctx)
}

// waitOpen waits until the latch is full or marked open.
func (l *Latch) waitOpen(ctx context.Context) error {
	return waitFor(ctx, l.c, []string{l.name, l.name + openSuffix}, func(ctx context.Context) (bool, error) {
		n, err := l.Count(ctx)
		if err != nil || n == 0 {
			return err == nil, err
		}
		st, err := l.c.State(ctx, l.name+openSuffix)
		return err == nil && st.Held, err
	})
}

// release gives back a read lock, within releaseTimeout even after ctx
// ended; a release that fails leaves it to its TTL.
func release(ctx context.Context, m *client.Mutex) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_ = m.Unlock(uctx)
}

// Close ends the handle's part in the latch's round: it waits until the
// latch has opened, marks it open, gives back the permits of the
// handle's CountDowns, and waits until every counter has done so and no
// Wait is registered (see Latch). If ctx ends before the latch opened,
// Close withdraws: it gives the permits back (the count goes up) and
// returns an error wrapping ctx.Err(). Errors of the releases are joined;
// a permit that cannot be released is freed by the server when its TTL
// runs out. A handle without CountDowns returns at once.
func (l *Latch) Close(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) == 0 {
		l.pending = nil
		return nil
	}
	if err := l.waitOpen(ctx); err != nil {
		return errors.Join(fmt.Errorf("recipe: latch %q close: %w", l.name, err), l.giveBack(ctx))
	}
	mark := l.c.RWMutex(l.name+openSuffix, l.opts...).Reader()
	if err := mark.Lock(ctx); err != nil {
		return fmt.Errorf("recipe: latch %q close: mark open: %w", l.name, err)
	}
	defer release(ctx, mark)
	if err := l.giveBack(ctx); err != nil {
		return err
	}
	err := waitFor(ctx, l.c, []string{l.name, l.name + waitingSuffix}, func(ctx context.Context) (bool, error) {
		st, err := l.c.Semaphore(l.name, l.count).State(ctx)
		if err != nil || st.InUse > 0 {
			return false, err
		}
		ws, err := l.c.State(ctx, l.name+waitingSuffix)
		return err == nil && !ws.Held, err
	})
	if err != nil {
		return fmt.Errorf("recipe: latch %q close: waiting for the others: %w", l.name, err)
	}
	return nil
}

// giveBack releases the handle's permits (l.mu held), within
// releaseTimeout even after ctx ended.
func (l *Latch) giveBack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	held := l.held
	l.held, l.pending = nil, nil
	var errs []error
	for _, s := range held {
		if err := s.Release(ctx); err != nil && !errors.Is(err, client.ErrLockLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
