package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// The tests here check the holder's contract (doc.go, "The holder's
// contract") on the client's side: the validity never outlasts what the
// master may hold, and every way of asking reads the clock.

// TestRenewShorterTTLShortensValidity: a Renew with a shorter TTL moves
// the validity earlier, to its send time plus the new TTL less the
// margin; a longer one moves it later again.
func TestRenewShorterTTLShortensValidity(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	m := c.Mutex("short", TTL(60*time.Second))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	long := m.ValidUntil()
	if time.Until(long) < 50*time.Second {
		t.Fatalf("valid for %v after a 60 s grant", time.Until(long))
	}
	if err := m.Renew(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	short := m.ValidUntil()
	if limit := after.Add(2*time.Second - margin(c, 2*time.Second)); short.After(limit) {
		t.Fatalf("after Renew(2s) valid until %v past the renewal's answer (want at most %v)", short.Sub(after), limit.Sub(after))
	}
	if err := m.Renew(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if again := m.ValidUntil(); time.Until(again) < 20*time.Second {
		t.Fatalf("after Renew(30s) valid for only %v", time.Until(again))
	}
}

// TestShortRenewUnansweredShortens: a shorter Renew whose answer never
// comes (the master may have applied it) leaves the validity at the
// shorter bound, not at the longer one the last answer gave.
func TestShortRenewUnansweredShortens(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	cfg := testConfig(n.addr)
	cfg.RequestTimeout = 200 * time.Millisecond
	cfg.MaxRetries = 1
	c := newTestClient(t, cfg)
	m := c.Mutex("unanswered", TTL(60*time.Second))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	n.set(func(n *fakeNode) { n.dropRenews = true })
	before := time.Now()
	if err := m.Renew(ctx, 2*time.Second); err == nil {
		t.Fatal("a renewal nobody answered succeeded")
	}
	// The renewal left at or after before; the master's deadline, if it
	// applied it, is at least that plus 2 s.
	if v := m.ValidUntil(); !v.IsZero() && v.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("valid for %v after an unanswered Renew(2s) sent %v ago", time.Until(v), time.Since(before))
	}
}

// TestHeldReadsTheClock: a hold whose validity has passed is reported
// lost by Held, ValidUntil, Lost and Context().Err() at once, though its
// expiry timer has not run (a process paused past its validity).
func TestHeldReadsTheClock(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	m := c.Mutex("paused", TTL(time.Minute))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx := m.Context()
	if !m.Held() || hctx.Err() != nil {
		t.Fatal("not held right after Lock")
	}
	// As after a pause: the validity is in the past, the timer far away.
	h := m.held()
	h.mu.Lock()
	h.validUntil = time.Now().Add(-time.Millisecond)
	h.expT.Reset(time.Hour)
	h.mu.Unlock()
	if m.Held() {
		t.Fatal("Held is true past the validity")
	}
	if !m.ValidUntil().IsZero() {
		t.Fatal("ValidUntil is set past the validity")
	}
	if !isClosed(m.Lost()) {
		t.Fatal("Lost is open past the validity")
	}
	if hctx.Err() == nil || !errors.Is(context.Cause(hctx), ErrLockLost) {
		t.Fatalf("Context: %v (cause %v), want cancelled with ErrLockLost", hctx.Err(), context.Cause(hctx))
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock after the loss: %v, want ErrLockLost", err)
	}
}

// TestContextEndsWithHold: the Context of a hold is cancelled by Unlock
// (cause ErrNotHeld), and a handle that holds nothing gives a cancelled
// one.
func TestContextEndsWithHold(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	m := c.Mutex("ctx")
	if m.Context().Err() == nil {
		t.Fatal("Context of a handle that holds nothing is not cancelled")
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx := m.Context()
	if hctx.Err() != nil {
		t.Fatal("Context cancelled while held")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Context not cancelled by Unlock")
	}
	if !errors.Is(context.Cause(hctx), ErrNotHeld) {
		t.Fatalf("cause %v, want ErrNotHeld", context.Cause(hctx))
	}
}

// TestRevokedAcknowledged: a Lost EventRevoked push ends the hold at once
// and the client acknowledges with a Release of the token, which is what
// lets the master hand the key on.
func TestRevokedAcknowledged(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	m := c.Mutex("revoked", TTL(time.Minute), AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx := m.Context()
	n.revokeKeep("revoked")
	waitClosed(t, hctx.Done(), "the Context after the revocation")
	if m.Held() {
		t.Fatal("Held after the revocation")
	}
	n.waitFor(t, "the acknowledging release", func(n *fakeNode) bool {
		l := n.locks["revoked"]
		return l == nil || len(l.holders) == 0
	})
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock after the revocation: %v, want ErrLockLost", err)
	}
}

// TestRevokedAcknowledgedBeforeClose: a Close that follows the loss at
// once (a program that exits when its lock is lost) still acknowledges
// the revocation, so that the master hands the key on without waiting
// for the hold's TTL.
func TestRevokedAcknowledgedBeforeClose(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	for i := range 20 {
		key := fmt.Sprintf("revoked-close-%d", i)
		c := newTestClient(t, testConfig(n.addr))
		m := c.Mutex(key, TTL(time.Minute), AutoRenew())
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		lost := m.Lost()
		n.revokeKeep(key)
		waitClosed(t, lost, "Lost after the revocation")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		l := n.locks[key]
		acked := l == nil || len(l.holders) == 0
		n.mu.Unlock()
		if !acked {
			t.Fatalf("round %d: Close returned with the revocation of %s not acknowledged", i, key)
		}
	}
}

// TestRenewRevokedStatus: a renewal answered REVOKED loses the lock (an
// error wrapping ErrLockLost) and is acknowledged with a Release.
func TestRenewRevokedStatus(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	m := c.Mutex("revoked-renew", TTL(time.Minute))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	n.set(func(n *fakeNode) { n.renewStatus = wire.StatusRevoked })
	if err := m.Renew(ctx, 0); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Renew answered REVOKED: %v, want ErrLockLost", err)
	}
	if m.Held() {
		t.Fatal("Held after REVOKED")
	}
	n.waitFor(t, "the acknowledging release", func(n *fakeNode) bool {
		l := n.locks["revoked-renew"]
		return l == nil || len(l.holders) == 0
	})
}

// TestOnRenewTrouble: an automatic renewal that fails while the lock is
// valid is reported to OnRenewTrouble with the validity that remains; the
// lock is not lost, and a later renewal succeeds.
func TestOnRenewTrouble(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	cfg := testConfig(n.addr)
	cfg.MaxRetries = 1
	c := newTestClient(t, cfg)
	troubles := make(chan RenewTrouble, 16)
	m := c.Mutex("trouble", TTL(3*time.Second), AutoRenew(), OnRenewTrouble(func(tr RenewTrouble) {
		select {
		case troubles <- tr:
		default:
		}
	}))
	n.set(func(n *fakeNode) { n.renewStatus = wire.StatusNoMaster })
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var tr RenewTrouble
	select {
	case tr = <-troubles:
	case <-time.After(20 * time.Second):
		t.Fatal("no renewal trouble reported")
	}
	if tr.Key != "trouble" || tr.Token != m.Token() || !errors.Is(tr.Err, ErrNoMaster) || tr.ValidUntil.IsZero() {
		t.Fatalf("trouble %+v", tr)
	}
	n.set(func(n *fakeNode) { n.renewStatus = 0 })
	n.waitFor(t, "a successful renewal", func(n *fakeNode) bool { return len(n.renewedAt) > 0 })
}

// TestSlowConfirmationConfirmedAgain: a queued grant whose confirming
// Renew took more than a third of the TTL (its answer came late, as
// across a master change) is confirmed again, so that Lock does not
// return a lock whose validity is nearly or already over.
func TestSlowConfirmationConfirmedAgain(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	const ttl = 6 * time.Second
	n.set(func(n *fakeNode) { n.holdGranted = true })
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	holder, waiter := c.Mutex("slow", TTL(ttl)), c.Mutex("slow", TTL(ttl))
	before, done := queueBehind(t, n, holder, waiter)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n.waitFor(t, "the grant", func(n *fakeNode) bool { return len(n.heldGranted) == 1 })
	// A late push (the wait took a third of the TTL), then a confirmation
	// answered 4.5 s late: a validity counted from it would have about
	// 1 s left when Lock returns.
	<-time.After(time.Until(before.Add(ttl/3 + 50*time.Millisecond)))
	n.set(func(n *fakeNode) { n.slowRenews, n.renewDelay = 1, 4500*time.Millisecond })
	n.releaseGranted()
	if err := recvErr(t, done, "waiter.Lock"); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(waiter.ValidUntil()); left < 3*time.Second {
		t.Fatalf("Lock returned a lock valid for %v more, want it confirmed again (about %v)", left, ttl)
	}
	if n.count(wire.TypeRenew) < 2 {
		t.Fatalf("%d renewals, want the slow confirmation and another", n.count(wire.TypeRenew))
	}
	_ = waiter.Unlock(ctx)
}

// TestSlowDirectGrantConfirmed: a blocking Lock answered directly, but
// a third of the TTL or more after it was sent (its attempts spanned a
// master change), is confirmed with a Renew before Lock returns, instead
// of returning a lock whose validity is nearly over.
func TestSlowDirectGrantConfirmed(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	const ttl = 6 * time.Second
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	m := c.Mutex("slow-direct", TTL(ttl))
	n.set(func(n *fakeNode) { n.slowAcquires, n.renewDelay = 1, 4500*time.Millisecond })
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(m.ValidUntil()); left < 3*time.Second {
		t.Fatalf("Lock returned a lock valid for %v more, want it confirmed (about %v)", left, ttl)
	}
	if n.count(wire.TypeRenew) != 1 {
		t.Fatalf("%d renewals, want the confirmation", n.count(wire.TypeRenew))
	}
	_ = m.Unlock(ctx)
}
