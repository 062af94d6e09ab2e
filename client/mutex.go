package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// Mutex is a handle on one distributed lock: a key in the client's
// namespace, taken in one kind (a plain mutex, or one side of an RWMutex).
//
// The handle is the lock's owner (unless ProcessOwner is given): Lock on a
// handle that already holds the lock succeeds at once and counts (it also
// renews the lock), and the lock is released when Unlock has been called
// as many times. Goroutines that must exclude each other therefore use
// separate handles, which are cheap: creating one sends nothing. Methods
// are safe for concurrent use; operations on one handle run one at a time.
//
// While held, the lock is valid until the time its last acquire or renewal
// was sent plus its TTL, minus a margin (Config.ClockDrift), on the
// client's monotonic clock; a grant that ended a wait in the server's queue
// counts from the wait's first send or from a confirming renewal (see the
// package documentation). Past that, or when the server reports the lock
// gone, Lost is closed and Unlock returns an error wrapping ErrLockLost.
type Mutex struct {
	c     *Client
	key   string
	hash  uint64
	kind  wire.Kind
	opts  options
	err   error // a bad key or option, reported by every method
	owner wire.Owner
	state *ownerLock // nil for a ProcessOwner handle: looked up per call
	other *Mutex     // the other side of an RWMutex

	valMu sync.Mutex
	value string // the holder value acquires send (Value option, SetValue)

	sem *semFields // a Semaphore's permits and total; nil for locks
}

// semFields are a Semaphore's numbers, read by Mutex.acquireMsg.
type semFields struct {
	n     atomic.Uint32 // permits the (next) acquire takes
	total atomic.Uint32 // the total the handle assumes
}

func (f *semFields) permits() uint32 {
	if f == nil {
		return 0
	}
	return f.n.Load()
}

func (f *semFields) limit() uint32 {
	if f == nil {
		return 0
	}
	return f.total.Load()
}

// Mutex returns a handle on the exclusive lock key. It sends nothing; an
// invalid key or option is reported by the handle's methods.
func (c *Client) Mutex(key string, opts ...Option) *Mutex {
	o := buildOptions(opts)
	return c.newMutex(key, wire.KindExclusive, c.newOwner(o), o)
}

func (c *Client) newOwner(o options) wire.Owner {
	if c == nil {
		return wire.Owner{}
	}
	if o.processOwner {
		return wire.Owner{Client: c.id, ID: processOwnerID}
	}
	return wire.Owner{Client: c.id, ID: c.nextOwner.Add(1)}
}

func (c *Client) newMutex(key string, kind wire.Kind, owner wire.Owner, o options) *Mutex {
	m := &Mutex{c: c, key: key, kind: kind, opts: o, owner: owner, err: o.err, value: o.value}
	if c == nil {
		m.err = invalid("nil *Client")
		return m
	}
	if m.err == nil {
		m.err = validKey(key)
	}
	m.hash = wire.KeyHash(c.cfg.Namespace, key)
	if !o.processOwner {
		m.state = newOwnerLock(c, key, m.hash, kind, owner, false)
	}
	return m
}

// Key returns the lock's key.
func (m *Mutex) Key() string {
	if m == nil {
		return ""
	}
	return m.key
}

// Owner returns the owner the handle acquires as.
func (m *Mutex) Owner() wire.Owner {
	if m == nil {
		return wire.Owner{}
	}
	return m.owner
}

// Lock takes the lock, waiting until it is granted, ctx ends or MaxWait
// passes. The wait happens on the server: the client queues one request
// and is woken by the server's push, re-queueing by itself after a
// reconnect or a master change. When ctx ends first, Lock leaves the queue
// (CancelWait), releases the lock if the grant won that race, and returns
// an error wrapping ctx.Err(). When MaxWait (or the deadline of ctx, which
// the server is told about) passes in the queue, the error wraps
// ErrTimeout (and context.DeadlineExceeded if the deadline was ctx's).
//
// A reentrant Lock on a handle whose lock was lost returns an error
// wrapping ErrLockLost; Unlock as many times as Lock succeeded before
// locking again.
func (m *Mutex) Lock(ctx context.Context) error {
	if m.tracing() {
		return m.traced(ctx, "paxlock.Lock", func(ctx context.Context) error { return m.lock(ctx, true) })
	}
	return m.lock(ctx, true)
}

// TryLock takes the lock if it is free (or already held by this handle)
// and returns at once otherwise with a *LockedError, which wraps ErrLocked
// and names the holder. ctx bounds the request, retries included.
func (m *Mutex) TryLock(ctx context.Context) error {
	if m.tracing() {
		return m.traced(ctx, "paxlock.TryLock", func(ctx context.Context) error { return m.lock(ctx, false) })
	}
	return m.lock(ctx, false)
}

// Unlock undoes one Lock. The lock is released on the server when the
// count reaches zero. It returns an error wrapping ErrNotHeld if the handle
// does not hold the lock, and ErrLockLost if the lock had been lost (the
// count still drops). If the release cannot reach the cluster, the handle
// forgets the lock anyway and the server frees it when its TTL runs out.
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.tracing() {
		return m.traced(ctx, "paxlock.Unlock", m.unlock)
	}
	return m.unlock(ctx)
}

// unlock is Unlock.
func (m *Mutex) unlock(ctx context.Context) error {
	if err := m.check(); err != nil {
		return err
	}
	lc, err := m.enter(ctx)
	if err != nil {
		return m.wrap("unlock", err)
	}
	defer m.leave(lc)
	return m.unlockHeld(ctx, lc)
}

// unlockHeld is Unlock with the core's slot held.
func (m *Mutex) unlockHeld(ctx context.Context, lc *ownerLock) error {
	lc.mu.Lock()
	if lc.count == 0 {
		lc.mu.Unlock()
		return m.wrap("unlock", ErrNotHeld)
	}
	lc.count--
	h := lc.h
	if lc.count > 0 {
		lc.mu.Unlock()
		return h.lostErr()
	}
	lc.h = nil
	lc.mu.Unlock()

	if next := m.c.takeNext(lc); next != nil {
		return m.passOn(ctx, lc, h, next)
	}
	local, valid, lost := h.finish()
	if lost != nil {
		if local {
			// Our clock gave up first; the server may still hold it.
			_, _ = lc.sendRelease(ctx, h.token)
		}
		return lost
	}
	res, err := lc.sendRelease(ctx, h.token)
	if err != nil {
		return err
	}
	r := res.resp
	switch {
	case r.Status == wire.StatusSuccess:
		return nil
	case lostStatus(r.Status) && res.unknown && valid:
		// An earlier attempt released it: the lock was still valid when
		// it was sent, so the server could not have freed it otherwise.
		return nil
	}
	return statusErr("unlock", m.key, r)
}

// Renew extends the held lock to ttl from now (the handle's TTL if ttl is
// 0), and makes ttl the TTL later renewals ask for. It returns an error
// wrapping ErrNotHeld if the handle does not hold the lock, or ErrLockLost
// if the server says it is no longer the holder (Lost is then closed).
func (m *Mutex) Renew(ctx context.Context, ttl time.Duration) error {
	if m.tracing() {
		return m.traced(ctx, "paxlock.Renew", func(ctx context.Context) error { return m.renew(ctx, ttl) })
	}
	return m.renew(ctx, ttl)
}

// renew is Renew.
func (m *Mutex) renew(ctx context.Context, ttl time.Duration) error {
	if err := m.check(); err != nil {
		return err
	}
	if ttl < 0 || ttl > maxTTLField {
		return invalid("renew TTL %v", ttl)
	}
	lc, err := m.enter(ctx)
	if err != nil {
		return m.wrap("renew", err)
	}
	defer m.leave(lc)
	lc.mu.Lock()
	h := lc.h
	lc.mu.Unlock()
	if h == nil {
		return m.wrap("renew", ErrNotHeld)
	}
	return h.renew(ctx, ttl)
}

// SetValue replaces the holder value of the lock the handle holds with v
// (empty clears it), in one Renew that also extends the lock like
// Renew(ctx, 0); later acquires through the handle send v too. Watchers
// that saw the lock's token get an EventAcquired with the same token and
// the new value. It returns an error wrapping ErrInvalid (and
// wire.ErrValueTooLarge) for a value over wire.MaxValueLen, checked
// before anything is sent; ErrNotHeld if the handle holds nothing; and
// ErrLockLost like Renew. On an error the held value is unchanged, unless
// the error is a timeout (the Renew's fate is then unknown).
func (m *Mutex) SetValue(ctx context.Context, v string) error {
	if m.tracing() {
		return m.traced(ctx, "paxlock.SetValue", func(ctx context.Context) error { return m.setValue(ctx, v) })
	}
	return m.setValue(ctx, v)
}

// setValue is SetValue.
func (m *Mutex) setValue(ctx context.Context, v string) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := wire.ValidateValue(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	lc, err := m.enter(ctx)
	if err != nil {
		return m.wrap("set value", err)
	}
	defer m.leave(lc)
	lc.mu.Lock()
	h := lc.h
	lc.mu.Unlock()
	if h == nil {
		return m.wrap("set value", ErrNotHeld)
	}
	if err := h.renewValue(ctx, 0, true, v); err != nil {
		return err
	}
	m.valMu.Lock()
	m.value = v
	m.valMu.Unlock()
	return nil
}

// Value returns the holder value the handle's acquires send (the Value
// option, or the last successful SetValue).
func (m *Mutex) Value() string {
	m.valMu.Lock()
	defer m.valMu.Unlock()
	return m.value
}

// Token returns the fencing token of the lock the handle holds (or held
// until it was lost, until the matching Unlock), or 0 if it holds none. Pass it to the resource the lock protects, which should
// refuse tokens lower than the highest it has seen. A reentrant Lock keeps
// the token.
func (m *Mutex) Token() uint64 {
	lc := m.peek()
	if lc == nil {
		return 0
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.count > 0 && lc.h != nil {
		return lc.h.token
	}
	return 0
}

// held returns the hold the handle has now, or nil.
func (m *Mutex) held() *hold {
	lc := m.peek()
	if lc == nil {
		return nil
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.h
}

// Held reports whether the handle holds the lock now: it was granted, not
// released, not seen lost, and its validity has not run out on the
// client's monotonic clock. The clock is read at the call, so a process
// that was paused past the validity gets false (and Lost closes) even if
// no timer has run since it woke. While Held is true, no other owner
// holds a conflicting lock on the key (see the package documentation,
// "The holder's contract").
func (m *Mutex) Held() bool {
	h := m.held()
	return h != nil && h.valid()
}

// ValidUntil returns the instant, on the client's monotonic clock, until
// which the client guarantees the hold: no other owner is granted a
// conflicting lock before it unless this one is released first. Each
// successful renewal moves it (a renewal with a shorter TTL moves it
// earlier, from the moment the renewal is sent). It returns the zero time
// when the handle holds nothing valid. Compare it with time.Now() (whose
// monotonic reading is what counts) or pass it to context.WithDeadline.
func (m *Mutex) ValidUntil() time.Time {
	h := m.held()
	if h == nil {
		return time.Time{}
	}
	return h.validity()
}

// Context returns a context that is cancelled the moment the hold ends:
// lost (its cause then wraps ErrLockLost), released by Unlock (its cause
// wraps ErrNotHeld) or released by Client.Close (ErrClosed). Pass it to
// the work done under the lock, so that the work stops when the lock
// does; context.Cause says why. Its Err reads the validity clock when
// called, like Held. If the handle holds nothing, the context returned is
// already cancelled. Call it after Lock: the context belongs to the hold
// current at the call.
func (m *Mutex) Context() context.Context {
	h := m.held()
	if h == nil {
		return notHeldContext
	}
	return h.context()
}

var notHeldContext = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrNotHeld)
	return ctx
}()

// Lost returns a channel closed when the lock the handle holds is lost: its
// validity ran out without a successful renewal, the server pushed Lost
// (expired or revoked), or a renewal was answered LOCK_DELETED,
// LOCK_CHANGED_OWNER, TOKEN_ERROR or REVOKED. A receive on the channel
// learns of a validity that ran out only once the client's timer has run;
// check Held (or Context().Err()) right before acting, which reads the
// clock. The channel belongs to the hold
// current when Lost is called: call it after Lock. It is not closed by
// Unlock. If the handle holds nothing, the returned channel is closed.
func (m *Mutex) Lost() <-chan struct{} {
	lc := m.peek()
	if lc == nil {
		return closedChan
	}
	lc.mu.Lock()
	h := lc.h
	lc.mu.Unlock()
	if h == nil {
		return closedChan
	}
	return h.lostCh()
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func (m *Mutex) check() error {
	switch {
	case m == nil || m.c == nil && m.err == nil:
		return invalid("nil or zero lock handle: use Client.Mutex")
	case m.err != nil:
		return m.err
	case m.c.isClosed():
		return ErrClosed
	}
	return nil
}

func (m *Mutex) wrap(op string, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("client: %s %q: %w", op, m.key, err)
}

// enter returns the handle's core with its operation slot taken;
// m.leave(lc) gives the slot back.
func (m *Mutex) enter(ctx context.Context) (*ownerLock, error) {
	lc := m.state
	if lc == nil {
		lc = m.c.refOwnerLock(lockKey{key: m.key, kind: m.kind}, m)
	}
	if err := lc.take(ctx); err != nil {
		m.c.unrefOwnerLock(lc)
		return nil, err
	}
	return lc, nil
}

// leave gives back the slot enter took.
func (m *Mutex) leave(lc *ownerLock) {
	lc.give()
	m.c.unrefOwnerLock(lc)
}

// peek returns the handle's core without taking its slot, or nil.
func (m *Mutex) peek() *ownerLock {
	if m == nil || m.c == nil || m.err != nil {
		return nil
	}
	if m.state != nil {
		return m.state
	}
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.c.procLocks[lockKey{key: m.key, kind: m.kind}]
}

// checkOther refuses to take one side of an RWMutex while the handle holds
// the other: the server would queue the request behind the handle itself.
func (m *Mutex) checkOther() error {
	if m.other == nil {
		return nil
	}
	if lc := m.other.peek(); lc != nil {
		lc.mu.Lock()
		n := lc.count
		lc.mu.Unlock()
		if n > 0 {
			return invalid("%q: taking the %s lock while holding the %s lock (upgrade or downgrade) is not supported",
				m.key, m.kind, m.other.kind)
		}
	}
	return nil
}
