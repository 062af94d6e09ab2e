package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paxlock/paxlock/wire"
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
	core  *lockCore // nil for a ProcessOwner handle: looked up per call
	other *Mutex    // the other side of an RWMutex

	valMu sync.Mutex
	value string // the holder value acquires send (Value option, SetValue)

	sem *semFields // a Semaphore's permits and total; nil for locks
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
		m.core = newCore(c, key, m.hash, kind, owner, false)
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
func (m *Mutex) Lock(ctx context.Context) error { return m.lock(ctx, true) }

// TryLock takes the lock if it is free (or already held by this handle)
// and returns at once otherwise with a *LockedError, which wraps ErrLocked
// and names the holder. ctx bounds the request, retries included.
func (m *Mutex) TryLock(ctx context.Context) error { return m.lock(ctx, false) }

// Unlock undoes one Lock. The lock is released on the server when the
// count reaches zero. It returns an error wrapping ErrNotHeld if the handle
// does not hold the lock, and ErrLockLost if the lock had been lost (the
// count still drops). If the release cannot reach the cluster, the handle
// forgets the lock anyway and the server frees it when its TTL runs out.
func (m *Mutex) Unlock(ctx context.Context) error {
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
func (m *Mutex) unlockHeld(ctx context.Context, lc *lockCore) error {
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
		return m.handOff(ctx, lc, h, next)
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
func (m *Mutex) enter(ctx context.Context) (*lockCore, error) {
	lc := m.core
	if lc == nil {
		lc = m.c.refCore(coreKey{key: m.key, kind: m.kind}, m)
	}
	if err := lc.take(ctx); err != nil {
		m.c.unrefCore(lc)
		return nil, err
	}
	return lc, nil
}

// leave gives back the slot enter took.
func (m *Mutex) leave(lc *lockCore) {
	lc.give()
	m.c.unrefCore(lc)
}

// peek returns the handle's core without taking its slot, or nil.
func (m *Mutex) peek() *lockCore {
	if m == nil || m.c == nil || m.err != nil {
		return nil
	}
	if m.core != nil {
		return m.core
	}
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.c.procCores[coreKey{key: m.key, kind: m.kind}]
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

// stale reports whether a third of the grant's TTL or more has passed
// since the time it counts from: confirmQueued renews such a grant before
// Lock reports it held.
func (g granted) stale() bool { return g.ttl > 0 && time.Since(g.from) >= g.ttl/3 }

// granted is an acquire's success: the token, the effective TTL and the
// local time the TTL counts from. A queued grant (pushed, not answered)
// must go through confirmQueued before it counts as held.
type granted struct {
	token  uint64
	ttl    time.Duration // 0: unknown (queued grant from an older server)
	from   time.Time
	queued bool
}

// effTTL is the TTL a successful acquire or renewal asking for asked is
// counted with: the server's answer (leftMs, the TTL it applied) when it
// gives one, else known, the effective TTL known from before (0 if none),
// else asked. Never more than asked: the server may round a TTL up to
// its minimum, and counting less than it applied is safe.
func effTTL(asked time.Duration, leftMs uint32, known time.Duration) time.Duration {
	switch {
	case leftMs > 0:
		return min(asked, time.Duration(leftMs)*time.Millisecond)
	case known > 0:
		// A server answered without the TTL (a result that arrived
		// after a master change): it applied asked clamped to its
		// bounds, and the last effective TTL was within them.
		return min(asked, known)
	}
	return asked
}

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
	var g granted
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
	}
}

func (m *Mutex) lockedErr(r *wire.Response) error {
	return &LockedError{
		Key: m.key, Holder: r.Holder, Token: r.Token, Kind: r.Kind,
		TTLLeft: time.Duration(r.TTLLeftMs) * time.Millisecond, QueueLen: int(r.QueueLen),
		Value: r.Value, Permits: int(r.Permits), InUse: int(r.InUse),
		RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond,
	}
}

func (m *Mutex) acquireTry(ctx context.Context, lc *lockCore, handedOff *bool) (granted, error) {
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
		return granted{}, err
	}
	r := res.resp
	switch r.Status {
	case wire.StatusSuccess:
		return granted{token: r.Token, ttl: effTTL(m.opts.ttl, r.TTLLeftMs, 0), from: from}, nil
	case wire.StatusLockOccupied:
		return granted{}, m.lockedErr(r)
	}
	return granted{}, statusErr("trylock", m.key, r)
}

// acquireBlocking queues on the server and waits for the Granted push,
// re-sending the same Acquire (same WaitID) after a lost connection, a
// master change or a NO_MASTER grant.
//
// A grant pushed by the master is returned with queued set, counted from
// the send time of the wait's first Acquire (see confirmQueued).
func (m *Mutex) acquireBlocking(ctx context.Context, lc *lockCore, limit time.Time, handedOff *bool) (granted, error) {
	c := m.c
	w := &waiter{
		id:     c.nextWait.Add(1),
		core:   lc,
		hash:   m.hash,
		ch:     make(chan grant, 1),
		resend: make(chan struct{}, 1),
	}
	if !c.addWaiter(w) {
		return granted{}, ErrClosed
	}
	queued := false // a registration may be live on the server
	abandon := func(cause error) (granted, error) {
		if !queued {
			c.removeWaiter(w)
			return granted{}, cause
		}
		if c.isClosed() {
			// Close leaves the queue for it (leaveAtClose).
			return granted{}, cause
		}
		*handedOff = c.goClean(func() {
			defer m.leave(lc)
			lc.abandon(w)
		})
		return granted{}, cause
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
		before := c.view.Load()
		res, err := c.do(ctx, "lock", m.key, m.hash, wire.TypeAcquire, m.acquireMsg(wait, w.id))
		if err != nil {
			queued = queued || res.unknown
			return abandon(err)
		}
		r := res.resp
		switch r.Status {
		case wire.StatusSuccess:
			c.removeWaiter(w)
			return granted{token: r.Token, ttl: effTTL(m.opts.ttl, r.TTLLeftMs, 0), from: from}, nil
		case wire.StatusLockWait:
			queued = true
			c.setWaiterConn(w, res.cn, res.master)
			if res.cn.dead() || c.movedSince(before, m.hash, res.master) {
				w.signalResend()
			}
		case wire.StatusLockOccupied:
			c.removeWaiter(w)
			return granted{}, m.lockedErr(r)
		default:
			c.removeWaiter(w)
			return granted{}, statusErr("lock", m.key, r)
		}
		select {
		case g := <-w.ch:
			if c.isClosed() {
				// Close began, and select chose between the two at
				// random: the call ends with ErrClosed whichever came
				// first, and the outcome goes back to the wait, whose
				// grant Close gives back (leaveAtClose).
				w.deliver(g)
				return granted{}, ErrClosed
			}
			switch g.status {
			case wire.StatusSuccess:
				// The master started the TTL when it applied the grant,
				// at some time after first and before the push reached
				// us; how late the push is, nobody knows.
				c.removeWaiter(w)
				ttl := min(m.opts.ttl, time.Duration(g.ttlMs)*time.Millisecond)
				return granted{token: g.token, ttl: ttl, from: first, queued: true}, nil
			case wire.StatusTimeout:
				c.removeWaiter(w)
				return granted{}, m.timeoutErr(byCtx)
			case wire.StatusNoMaster:
				c.refreshWide()
			default:
				c.removeWaiter(w)
				return granted{}, fmt.Errorf("client: lock %q: grant with status %s: %w", m.key, g.status, statusSentinel(g.status))
			}
		case <-w.resend:
		case <-ctx.Done():
			return abandon(ctxErr("lock", m.key, ctx.Err(), nil))
		case <-c.done:
			// The wait stays registered: Close leaves the queue for it
			// and gives back a grant that raced (leaveAtClose).
			return granted{}, ErrClosed
		}
		// Re-send after a short pause.
		if err := c.sleep(ctx, c.backoff(min(n, 3))); err != nil {
			if errors.Is(err, ErrClosed) {
				return granted{}, ErrClosed // as above
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
func (m *Mutex) confirmQueued(ctx context.Context, lc *lockCore, g granted, handedOff *bool) (_ granted, again bool, _ error) {
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
			return granted{}, false, err
		}
		r := res.resp
		switch {
		case r.Status == wire.StatusSuccess:
			ng := granted{token: g.token, ttl: effTTL(m.opts.ttl, r.TTLLeftMs, g.ttl), from: from}
			if attempt < maxConfirms && time.Since(from) >= ng.ttl/3 {
				g = ng
				continue
			}
			return ng, false, nil
		case lostStatus(r.Status):
			c.log.Warn("paxlock: a queued grant ended before it could be confirmed; waiting again",
				"key", m.key, "token", g.token, "status", r.Status)
			return granted{}, true, nil
		}
		giveBack()
		return granted{}, false, statusErr("lock", m.key, r)
	}
}

// maxConfirms bounds the Renews confirmQueued sends for one grant.
const maxConfirms = 3

func (m *Mutex) timeoutErr(byCtx bool) error {
	if byCtx {
		return fmt.Errorf("client: lock %q: %w: %w", m.key, ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("client: lock %q: %w: MaxWait %v passed", m.key, ErrTimeout, m.opts.maxWait)
}

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

// ---- waiters ----

// waiter is a blocking acquire queued on the server, found by its WaitID
// when the Granted push arrives.
type waiter struct {
	id     uint64
	core   *lockCore
	hash   uint64
	ch     chan grant    // cap 1: the outcome
	resend chan struct{} // cap 1: re-send the Acquire
	// Guarded by Client.mu:
	conn      *conn  // where the last LOCK_WAIT came from
	master    string // the master that queued it (conn's address unless relayed)
	abandoned bool   // its Lock call gave up but could not leave the queue
}

type grant struct {
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
func (w *waiter) deliver(g grant) {
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

func (w *waiter) take() (grant, bool) {
	select {
	case g := <-w.ch:
		return g, true
	default:
		return grant{}, false
	}
}

func (c *Client) addWaiter(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.waits[w.id] = w
	if w.core.shared {
		w.core.refs++
	}
	return true
}

func (c *Client) removeWaiter(w *waiter) {
	c.mu.Lock()
	_, ok := c.waits[w.id]
	delete(c.waits, w.id)
	c.mu.Unlock()
	if ok {
		c.unrefCore(w.core)
	}
}

func (c *Client) setWaiterConn(w *waiter, cn *conn, master string) {
	c.mu.Lock()
	w.conn, w.master = cn, master
	c.mu.Unlock()
}

// movedSince reports whether the current view, compared with before (the
// view when a wait or watch was sent), names another master than addr for
// hash's group or a new term of it (see newTerm). A view that arrived
// while the request was in flight is handled here, since updateView did
// not yet know where the request went.
func (c *Client) movedSince(before *wire.View, hash uint64, addr string) bool {
	v := c.view.Load()
	if v == nil || v == before {
		return false
	}
	return newTerm(before, v, wire.GroupOf(hash, len(v.Groups)), addr)
}

// ---- cores ----

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

// ---- read-write locks ----

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
