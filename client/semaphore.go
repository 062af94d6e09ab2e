package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// ErrPermitsMismatch reports that a semaphore's permit total on the
// server is not the one the handle was made with (or last set): another
// user created it with another count, or changed it with SetPermits. The
// error is a *PermitsError; call SetPermits to change the total, or make
// the handle with the total State reports.
var ErrPermitsMismatch = errors.New("client: semaphore permit count differs")

// PermitsError is the error an Acquire gets when the semaphore's total is
// not the handle's. It wraps ErrPermitsMismatch.
type PermitsError struct {
	// Key is the semaphore's name.
	Key string
	// Have is the total on the server; Want the handle's.
	Have, Want int
}

// Error names both totals.
func (e *PermitsError) Error() string {
	return fmt.Sprintf("client: semaphore %q has %d permits, the handle says %d (use SetPermits to change it)", e.Key, e.Have, e.Want)
}

// Unwrap returns ErrPermitsMismatch.
func (e *PermitsError) Unwrap() error { return ErrPermitsMismatch }

// Semaphore is a handle on a counting semaphore: a name with a total of
// permits, of which holders take some with Acquire and give them back with
// Release. A handle is one holder: it holds the permits of one Acquire at
// a time (a second Acquire before Release is an error). A grant is leased
// like a lock: it has a TTL, is renewed in the background with AutoRenew,
// closes Lost when it ends without Release, carries a fencing token
// (higher for every later grant of the semaphore; holders granted
// together share one) and returns to the semaphore when its holder's TTL
// passes without a renewal or the Client is closed.
//
// The total is set by the first Acquire that finds the semaphore without
// holders and kept while anyone holds permits; an Acquire naming another
// total fails with a *PermitsError until the handle calls SetPermits.
//
// Waiting is on the server, in the key's queue (weight and arrival, as for
// locks): a waiter asking for n permits is granted when n permits are free
// and no waiter is ahead of it, so a large request at the head is not
// overtaken by smaller ones behind it.
//
// The permits of a grant have ids (PermitIDs), so that a program can hand
// them to its tasks and give them back one at a time with ReleasePermits;
// the grant keeps its token while it has permits left.
type Semaphore struct {
	onMutex // Key, Token, ValidUntil, Lost, Context: the handle's grant
	m       *Mutex
	f       *semFields
	err     error

	mu   sync.Mutex
	held int        // permits the handle holds (its last grant's, less those given back)
	ids  []PermitID // the ids of those permits (see ReleasePermits)
}

// Semaphore returns a handle on semaphore name with permits permits in
// all. It sends nothing. The options are those of Mutex (TTL, AutoRenew,
// Weight, MaxWait, Value) except ProcessOwner; a bad name, count or option
// is reported by the handle's methods.
func (c *Client) Semaphore(name string, permits int, opts ...Option) *Semaphore {
	o := buildOptions(opts)
	f := &semFields{}
	s := &Semaphore{f: f}
	switch {
	case o.processOwner:
		s.err = invalid("semaphore %q: ProcessOwner does not apply to semaphores", name)
	case permits < 1 || permits > 1<<31:
		s.err = invalid("semaphore %q: %d permits, want at least 1", name, permits)
	}
	f.total.Store(uint32(max(0, min(permits, 1<<31))))
	s.m = c.newMutex(name, wire.KindSemaphore, c.newOwner(o), o)
	s.m.sem = f
	m := s.m
	s.onMutex = onMutex{key: name, cur: func() *Mutex { return m }}
	return s
}

// Permits returns the total the handle assumes (its constructor's, or the
// last SetPermits).
func (s *Semaphore) Permits() int { return int(s.f.total.Load()) }

// Held returns how many permits the handle holds (0 when it holds none or
// saw its grant lost).
func (s *Semaphore) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.m.Held() {
		return 0
	}
	return s.held
}

func (s *Semaphore) check(n int) error {
	switch {
	case s == nil:
		return invalid("nil *Semaphore")
	case s.err != nil:
		return s.err
	case s.m.err != nil:
		return s.m.err
	case n < 1 || n > s.Permits():
		return invalid("semaphore %q: acquire %d permits of %d", s.m.key, n, s.Permits())
	}
	return nil
}

// Acquire takes n permits, waiting in the server's queue until they are
// granted, ctx ends or MaxWait passes (see Mutex.Lock for how a wait
// ends). It fails with ErrInvalid when the handle already holds permits,
// and with a *PermitsError when the semaphore's total is not the handle's.
// After a grant was lost, call Release (which then returns an error
// wrapping ErrLockLost) before acquiring again.
func (s *Semaphore) Acquire(ctx context.Context, n int) error { return s.acquire(ctx, n, true) }

// TryAcquire takes n permits if they are free and nobody waits ahead, and
// returns at once otherwise with a *LockedError (wrapping ErrLocked) that
// gives the semaphore's total and permits in use.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) error { return s.acquire(ctx, n, false) }

func (s *Semaphore) acquire(ctx context.Context, n int, block bool) error {
	if err := s.check(n); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m.Held() {
		return invalid("semaphore %q: the handle holds %d permits; Release first", s.m.key, s.held)
	}
	s.f.n.Store(uint32(n))
	var err error
	if block {
		err = s.m.Lock(ctx)
	} else {
		err = s.m.TryLock(ctx)
	}
	if err != nil {
		return s.mismatch(ctx, err)
	}
	s.held = n
	s.ids = permitIDs(s.m.Token(), n)
	return nil
}

// mismatch turns a BAD_REQUEST for another total into a *PermitsError.
func (s *Semaphore) mismatch(ctx context.Context, err error) error {
	if !errors.Is(err, ErrBadRequest) {
		return err
	}
	st, serr := s.State(ctx)
	if serr != nil || st.Permits == 0 || st.Permits == s.Permits() {
		return err
	}
	return fmt.Errorf("%w (%w)", &PermitsError{Key: s.m.key, Have: st.Permits, Want: s.Permits()}, err)
}

// Release gives the handle's permits back (all it holds; ReleasePermits
// gives back some). It returns an error wrapping
// ErrNotHeld if the handle holds none, and ErrLockLost if its grant had
// been lost; see Mutex.Unlock.
func (s *Semaphore) Release(ctx context.Context) error {
	if s == nil {
		return invalid("nil *Semaphore")
	}
	if s.err != nil {
		return s.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseLocked(ctx)
}

// releaseLocked is Release with s.mu held.
func (s *Semaphore) releaseLocked(ctx context.Context) error {
	err := s.m.Unlock(ctx)
	if !errors.Is(err, ErrNotHeld) {
		s.held, s.ids = 0, nil
	}
	return err
}

// SetPermits changes the semaphore's total to n and the handle's with it.
// Lowering it below the permits in use keeps every holder's permits and
// grants nothing more until usage is under the new total; raising it may
// grant queued waiters at once. A semaphore nobody holds keeps no total:
// SetPermits then only changes the handle's, and the next Acquire sets it.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if s == nil {
		return invalid("nil *Semaphore")
	}
	if s.err != nil {
		return s.err
	}
	if s.m.err != nil {
		return s.m.err
	}
	if n < 1 || n > 1<<31 {
		return invalid("semaphore %q: %d permits, want at least 1", s.m.key, n)
	}
	m := &wire.Acquire{Key: s.m.key, Owner: s.m.owner, Kind: wire.KindSemaphore, Flags: wire.FlagSetPermits,
		Weight: wire.DefaultWeight, Limit: uint32(n)}
	res, err := s.m.c.do(ctx, "setpermits", s.m.key, s.m.hash, wire.TypeAcquire, m)
	if err != nil {
		return err
	}
	if res.resp.Status != wire.StatusSuccess {
		return statusErr("setpermits", s.m.key, res.resp)
	}
	s.f.total.Store(uint32(n))
	return nil
}

// SemaphoreState is a semaphore's state as the master of its group sees
// it.
type SemaphoreState struct {
	// Key is the semaphore's name.
	Key string
	// Permits is the total, 0 when nobody holds permits (the semaphore
	// then keeps no total). InUse is the permits held.
	Permits, InUse int
	// Holders are the holders in grant order (at most wire.MaxListLimit).
	Holders []SemaphoreHolder
	// QueueLen is the number of waiters.
	QueueLen int
}

// SemaphoreHolder is one holder of a semaphore's permits.
type SemaphoreHolder struct {
	// Owner is the holder and Token its grant's fencing token.
	Owner wire.Owner
	Token uint64
	// Permits is how many permits it holds.
	Permits int
	// Value is its holder value (the Value option).
	Value string
	// TTLLeft is how long its grant has left without a renewal.
	TTLLeft time.Duration
}

// State asks the master of the semaphore's group for its total, permits
// in use, holders and waiters; no Paxos round is made.
func (s *Semaphore) State(ctx context.Context) (SemaphoreState, error) {
	if s == nil {
		return SemaphoreState{}, invalid("nil *Semaphore")
	}
	if s.m.err != nil {
		return SemaphoreState{}, s.m.err
	}
	res, err := s.m.c.do(ctx, "state", s.m.key, s.m.hash, wire.TypeState, &wire.State{Key: s.m.key})
	if err != nil {
		return SemaphoreState{}, err
	}
	r := res.resp
	st := SemaphoreState{Key: s.m.key, QueueLen: int(r.QueueLen)}
	switch {
	case r.Status == wire.StatusLockDeleted:
		return st, nil
	case r.Status != wire.StatusSuccess:
		return SemaphoreState{}, statusErr("state", s.m.key, r)
	case r.Kind != wire.KindSemaphore:
		return SemaphoreState{}, fmt.Errorf("client: semaphore %q: the key is held as a %v lock: %w", s.m.key, r.Kind, ErrLocked)
	}
	st.Permits, st.InUse = int(r.Permits), int(r.InUse)
	for _, l := range r.Locks {
		st.Holders = append(st.Holders, SemaphoreHolder{Owner: l.Holder, Token: l.Token, Permits: int(l.Permits),
			Value: l.Value, TTLLeft: time.Duration(l.TTLLeftMs) * time.Millisecond})
	}
	return st, nil
}
