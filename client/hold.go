package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// This file is the holder's side of the lock contract (see the package
// documentation, "The holder's contract"): a hold's validity on the
// client's monotonic clock never ends later than the master's deadline
// for it, and every way of asking "do I hold it?" looks at that clock at
// the moment it is asked.

type holdKey struct {
	key   string
	token uint64
	owner uint64
}

// RenewTrouble describes an automatic renewal that failed while the lock
// is still valid (see OnRenewTrouble): the client tries again until the
// validity runs out, and closes Lost then.
type RenewTrouble struct {
	// Key is the lock's key and Token its fencing token.
	Key   string
	Token uint64
	// Err is why the renewal failed (ErrTimeout, ErrNoMaster, a broken
	// connection...).
	Err error
	// ValidUntil is the validity the hold keeps meanwhile, on the
	// client's monotonic clock.
	ValidUntil time.Time
}

// errReleased is the cause of a hold's Context once Unlock released it.
var errReleased = fmt.Errorf("client: lock released: %w", ErrNotHeld)

// hold is one granted lock: its token, its validity on the client's clock,
// its renewal and expiry timers, and what tells the caller it ended (the
// Lost channel and the Context).
type hold struct {
	c         *Client
	state     *ownerLock
	key       string
	hash      uint64
	owner     wire.Owner
	token     uint64
	onTrouble func(RenewTrouble) // OnRenewTrouble; nil if none

	// renewMu serializes the hold's renewals (automatic, Renew, SetValue,
	// a reentrant Lock, Downgrade). With at most one in flight, the
	// master's deadline is always one of two known bounds (the last
	// confirmed renewal's, or the one in flight's), and the validity is
	// kept at the smaller (see beginRenewLocked).
	renewMu sync.Mutex

	mu         sync.Mutex
	lost       chan struct{} // see lostCh; nil until asked for
	ctx        context.Context
	cancel     context.CancelCauseFunc // ends ctx; nil until Context is asked for
	reqTTL     time.Duration           // what renewals ask for
	ttl        time.Duration           // the effective TTL of the last grant or renewal
	validUntil time.Time
	// limitAt is when the hold reaches its maximum hold time on the
	// client's clock (see MaxHold): validUntil never passes it, and no
	// renewal is sent after it. Zero for no bound.
	limitAt time.Time
	ended   bool  // released or lost
	err     error // why it was lost
	local   bool  // lost because its validity ran out on our clock
	renewT  *time.Timer
	expT    *time.Timer
}

func (c *Client) newHold(lc *ownerLock, g acquired, o options) *hold {
	h := &hold{
		c: c, state: lc, key: lc.key, hash: lc.hash, owner: lc.owner, token: g.token,
		onTrouble: o.onTrouble,
		reqTTL:    o.ttl, ttl: g.ttl,
	}
	if o.maxHold > 0 {
		h.limitAt = c.validUntil(g.from, o.maxHold)
	}
	h.validUntil = h.capped(c.validUntil(g.from, g.ttl))
	h.mu.Lock()
	h.expT = time.AfterFunc(time.Until(h.validUntil), h.expire)
	if o.autoRenew && h.renewsBefore(g.from.Add(g.ttl/3)) {
		h.renewT = time.AfterFunc(time.Until(g.from.Add(g.ttl/3)), h.autoRenew)
	}
	h.mu.Unlock()
	c.mu.Lock()
	c.holds[holdKey{key: h.key, token: h.token, owner: h.owner.ID}] = h
	c.mu.Unlock()
	return h
}

// capped returns validity t capped at the hold's maximum hold time.
func (h *hold) capped(t time.Time) time.Time {
	if !h.limitAt.IsZero() && t.After(h.limitAt) {
		return h.limitAt
	}
	return t
}

// renewsBefore reports whether a renewal at t is worth sending: before the
// hold's maximum hold time, past which no renewal extends it.
func (h *hold) renewsBefore(t time.Time) bool {
	return h.limitAt.IsZero() || t.Before(h.limitAt)
}

// validUntil is when a lock granted for ttl on a request sent at from
// stops being valid on the client's clock.
func (c *Client) validUntil(from time.Time, ttl time.Duration) time.Time {
	return from.Add(ttl - time.Duration(float64(ttl)*c.cfg.ClockDrift))
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

// valid reports whether the hold is held and valid now. A hold whose
// validity has passed is marked lost here, at once, even if its expiry
// timer has not run yet: a process that was paused past the validity
// sees the loss the first time it asks, before it acts.
func (h *hold) valid() bool {
	h.mu.Lock()
	switch {
	case h.ended:
		h.mu.Unlock()
		return false
	case time.Now().Before(h.validUntil):
		h.mu.Unlock()
		return true
	}
	h.mu.Unlock()
	h.expire()
	return false
}

// validity returns the hold's validity deadline, or the zero time if it
// is not valid now (see valid).
func (h *hold) validity() time.Time {
	if !h.valid() {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// lostCh returns the hold's Lost channel, made on first use (most holds
// are never asked for it): closed if the hold was already lost.
func (h *hold) lostCh() <-chan struct{} {
	h.valid() // a validity that passed closes the channel now
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost == nil {
		if h.err != nil {
			h.lost = closedChan
		} else {
			h.lost = make(chan struct{})
		}
	}
	return h.lost
}

// context returns the hold's Context, made on first use: cancelled when
// the hold ends, with the reason as its cause.
func (h *hold) context() context.Context {
	h.valid()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		h.ctx, h.cancel = &holdContext{Context: ctx, h: h}, cancel
		if h.ended {
			cancel(h.endCauseLocked())
		}
	}
	return h.ctx
}

// endCauseLocked is why the hold's Context ends: the loss, or the release.
func (h *hold) endCauseLocked() error {
	if h.err != nil {
		return h.err
	}
	return errReleased
}

// endLocked marks the hold ended and tells whoever listens: the timers
// stop, Lost closes, the Context is cancelled.
func (h *hold) endLocked() {
	h.ended = true
	h.stopTimersLocked()
	if h.lost != nil && h.err != nil && h.lost != closedChan {
		close(h.lost)
	}
	if h.cancel != nil {
		h.cancel(h.endCauseLocked())
	}
}

// holdContext is a hold's Context. Err looks at the hold's validity when
// asked, so a process that was paused past it sees the context cancelled
// at its first check, before the expiry timer has had a chance to run.
type holdContext struct {
	context.Context
	h *hold
}

// Err reports context.Canceled once the hold has ended, checking its
// validity first.
func (x *holdContext) Err() error {
	x.h.valid()
	return x.Context.Err()
}

func (h *hold) lostErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *hold) stopTimersLocked() {
	h.expT.Stop()
	if h.renewT != nil {
		h.renewT.Stop()
	}
}

func (h *hold) forget() {
	h.c.mu.Lock()
	k := holdKey{key: h.key, token: h.token, owner: h.owner.ID}
	if h.c.holds[k] == h {
		delete(h.c.holds, k)
	}
	h.c.mu.Unlock()
}

// markLost ends the hold as lost and closes its Lost channel, once.
func (h *hold) markLost(err error, local bool) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.err, h.local = err, local
	h.endLocked()
	h.mu.Unlock()
	h.forget()
	// Local waiters must not wait for an Unlock of a lock that is gone.
	h.c.passLocal(h.state)
	h.c.log.Warn("paxlock: lock lost", "key", h.key, "token", h.token, "err", err)
}

// revoked ends the hold because the server revoked it (a force-unlock),
// then acknowledges the revocation with a release of the token: the
// master frees a revoked key only once its holder has stopped believing
// it holds it (this release) or the hold's deadline has passed. The
// acknowledgement is a clean-up registered before Lost closes, so that a
// Close made as soon as the loss is seen waits for it rather than leaving
// the key to its deadline; it is sent once the hold has ended.
func (h *hold) revoked(err error) {
	ended := make(chan struct{})
	h.c.goClean(func() {
		<-ended
		ctx, cancel := context.WithTimeout(h.c.ctx, h.c.cfg.RequestTimeout)
		defer cancel()
		if _, err := h.state.sendRelease(ctx, h.token); err != nil {
			h.c.log.Debug("paxlock: acknowledging a revoked lock failed; the server frees it at its deadline", "key", h.key, "token", h.token, "err", err)
		}
	})
	h.markLost(err, false)
	close(ended)
}

// endForClose ends the hold because Client.Close is releasing it: its
// Lost channel closes and Unlock returns an error wrapping ErrClosed. It
// reports false if the hold had already ended (released or lost).
func (h *hold) endForClose() bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.err = fmt.Errorf("%w: %q (token %d): released by Close", ErrClosed, h.key, h.token)
	h.endLocked()
	h.mu.Unlock()
	h.forget()
	return true
}

// finish ends the hold for Unlock. It returns whether the loss (if any)
// was our own clock's doing, whether the hold was still valid on our
// clock, and why the hold was lost (nil if it was not).
func (h *hold) finish() (local, valid bool, lost error) {
	h.mu.Lock()
	wasEnded := h.ended
	lost, local = h.err, h.local
	valid = time.Now().Before(h.validUntil)
	if !wasEnded {
		h.endLocked()
	}
	h.mu.Unlock()
	if !wasEnded {
		h.forget()
	}
	return local, valid, lost
}

func (h *hold) expire() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	if d := time.Until(h.validUntil); d > 0 {
		h.expT.Reset(d)
		h.mu.Unlock()
		return
	}
	limited := !h.limitAt.IsZero() && !h.validUntil.Before(h.limitAt)
	h.mu.Unlock()
	if limited {
		h.markLost(fmt.Errorf("%w: %q (token %d): held for its maximum hold time", ErrHoldLimit, h.key, h.token), true)
		return
	}
	h.markLost(fmt.Errorf("%w: %q (token %d): not renewed within its TTL", ErrLockLost, h.key, h.token), true)
}

// beginRenewLocked is called as a renewal asking for asked is sent at
// from (with renewMu held). Whatever becomes of the renewal, the master's
// deadline afterwards is at least the smaller of the current validity
// (if it never applies the renewal) and from + the TTL it applies (if it
// does, at a moment after from). It applies at least min(asked, h.ttl):
// a shorter TTL is raised to its min_ttl at most, a longer one is capped
// at its max_ttl, which is at least the TTL it applied before. So the
// validity drops to from + that TTL when that is sooner: a renewal with a
// shorter TTL shortens the validity before it is sent, and a renewal
// whose answer is lost leaves it there.
func (h *hold) beginRenewLocked(from time.Time, asked time.Duration) {
	floor := asked
	if h.ttl > 0 {
		floor = min(asked, h.ttl)
	}
	if nv := h.c.validUntil(from, floor); nv.Before(h.validUntil) {
		h.validUntil = nv
		h.expT.Reset(time.Until(nv))
	}
}

// extend records a successful renewal sent at from with ttl its
// effective TTL. The renewal is the master's latest word (renewals are
// serialized), so its deadline replaces the hold's, shorter or longer.
func (h *hold) extend(from time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ttl = ttl
	h.validUntil = h.capped(h.c.validUntil(from, ttl))
	h.expT.Reset(time.Until(h.validUntil))
	if h.renewT != nil {
		if next := from.Add(ttl / 3); h.renewsBefore(next) {
			h.renewT.Reset(max(time.Until(next), 0))
		} else {
			h.renewT.Stop()
		}
	}
}

// renew sends one Renew (with its retries) and applies the answer.
func (h *hold) renew(ctx context.Context, ttl time.Duration) error {
	return h.renewValue(ctx, ttl, false, "")
}

// renewValue is renew that also sets the holder value when setValue.
func (h *hold) renewValue(ctx context.Context, ttl time.Duration, setValue bool, value string) error {
	h.renewMu.Lock()
	defer h.renewMu.Unlock()
	h.mu.Lock()
	if h.ended {
		err := h.err
		h.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("client: renew %q: %w", h.key, ErrNotHeld)
		}
		return err
	}
	if ttl > 0 {
		h.reqTTL = ttl
	} else {
		ttl = h.reqTTL
	}
	known := h.ttl
	from := time.Now()
	h.beginRenewLocked(from, ttl)
	h.mu.Unlock()
	res, err := h.c.do(ctx, "renew", h.key, h.hash, wire.TypeRenew,
		&wire.Renew{Key: h.key, Owner: h.owner, Token: h.token, TTLMs: ttlMs(ttl), SetValue: setValue, Value: value})
	if err != nil {
		return err
	}
	return h.applyRenewal("renew", from, ttl, known, res.resp)
}

// applyRenewal applies the answer r to a renewal (or a downgrade) asking
// for ttl, sent at from, when the effective TTL known before was known.
func (h *hold) applyRenewal(op string, from time.Time, ttl, known time.Duration, r *wire.Response) error {
	switch {
	case r.Status == wire.StatusSuccess:
		h.extend(from, effTTL(ttl, r.TTLLeftMs, known))
		return nil
	case r.Status == wire.StatusRevoked:
		err := statusErr(op, h.key, r)
		h.revoked(err)
		return err
	case lostStatus(r.Status):
		err := statusErr(op, h.key, r)
		h.markLost(err, false)
		return err
	}
	return statusErr(op, h.key, r)
}

// autoRenew runs on the renewal timer: it renews, and on a transient
// failure tells OnRenewTrouble and tries again soon; the expiry timer
// declares the lock lost if no renewal succeeds in time.
func (h *hold) autoRenew() {
	h.mu.Lock()
	if h.ended || h.c.isClosed() || !h.renewsBefore(time.Now()) {
		h.mu.Unlock()
		return
	}
	until := h.validUntil
	h.mu.Unlock()
	ctx, cancel := context.WithDeadline(h.c.ctx, until)
	err := h.renew(ctx, 0)
	cancel()
	if err == nil || errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrClosed) {
		return
	}
	h.mu.Lock()
	if h.ended || h.c.isClosed() {
		h.mu.Unlock()
		return
	}
	until = h.validUntil
	h.renewT.Reset(max(h.ttl/10, time.Millisecond))
	h.mu.Unlock()
	h.c.log.Warn("paxlock: renewal failed; retrying while the lock is valid", "key", h.key, "token", h.token, "valid_for", time.Until(until), "err", err)
	if h.onTrouble != nil {
		h.onTrouble(RenewTrouble{Key: h.key, Token: h.token, Err: err, ValidUntil: until})
	}
}
