// This file is the count-down latch: Latch.

package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/paxlock/paxlock/client"
)

// maxCount is the largest latch count and double-barrier size: a
// semaphore's largest total.
const maxCount = 1 << 31

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
// goes up again. So a participant that counts down keeps its client (and
// the handle) open until the latch has served its purpose: typically it
// waits too (CountDown then Wait) and closes once Wait returned. A latch
// whose permits were all given back counts from count again: it is a
// leased latch, not a durable one. A master change is transparent: the
// permits are replicated, Wait's watch is registered again by the client,
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

// Wait blocks until the latch is open (Count is 0), ctx ends (an error
// wrapping ctx.Err()) or the client closes. It is woken by the server's
// watch pushes on the latch's key, never by polling; an open latch
// returns at once.
func (l *Latch) Wait(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	return waitFor(ctx, l.c, []string{l.name}, func(ctx context.Context) (bool, error) {
		n, err := l.Count(ctx)
		return err == nil && n == 0, err
	})
}

// Close gives back the permits of the handle's CountDowns: each counts
// the latch up again. Call it once the latch has done its work (or to
// withdraw). Errors of the releases are joined; a permit that cannot be
// released is freed by the server when its TTL runs out.
func (l *Latch) Close(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	held := l.held
	l.held, l.pending = nil, nil
	l.mu.Unlock()
	var errs []error
	for _, s := range held {
		if err := s.Release(ctx); err != nil && !errors.Is(err, client.ErrLockLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
