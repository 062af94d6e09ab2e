package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/internal/testutil"
	"github.com/paxlock/paxlock/client/wire"
)

// Tests assert on events (a push arrived, the fake saw a request), never on
// how long something took; the generous deadlines only stop a hung test.

// testLogger is quiet unless PAXLOCK_TEST_LOG is set (testutil.Logger).
func testLogger() *slog.Logger { return testutil.Logger() }

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testConfig(registry ...string) Config {
	return Config{
		Registry:       registry,
		Namespace:      fakeNS,
		Secret:         fakeSecret,
		Logger:         testLogger(),
		RequestTimeout: 5 * time.Second,
		RetryBackoff:   2 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
	}
}

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(tctx(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// goErr runs f in a goroutine and returns a channel with its error.
func goErr(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func recvErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

func TestTryLockAndUnlock(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m1, m2 := c.Mutex("k"), c.Mutex("k")
	if err := m1.TryLock(ctx); err != nil {
		t.Fatalf("m1.TryLock: %v", err)
	}
	tok1 := m1.Token()
	if tok1 == 0 || !m1.Held() {
		t.Fatalf("token %d held %v", tok1, m1.Held())
	}
	if o, tok, ok := n.holderOf("k"); !ok || o != m1.Owner() || tok != tok1 {
		t.Fatalf("server holder %v %d %v, want %v %d", o, tok, ok, m1.Owner(), tok1)
	}
	err := m2.TryLock(ctx)
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("m2.TryLock: %v, want ErrLocked", err)
	}
	if le.Holder != m1.Owner() || le.Token != tok1 {
		t.Fatalf("LockedError %+v, want holder %v token %d", le, m1.Owner(), tok1)
	}
	if m2.Token() != 0 || m2.Held() || !isClosed(m2.Lost()) {
		t.Fatal("m2 should hold nothing")
	}
	if err := m1.Unlock(ctx); err != nil {
		t.Fatalf("m1.Unlock: %v", err)
	}
	if err := m1.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if err := m2.TryLock(ctx); err != nil {
		t.Fatalf("m2.TryLock after unlock: %v", err)
	}
	if m2.Token() <= tok1 {
		t.Fatalf("token %d not above %d", m2.Token(), tok1)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.holderOf("k"); ok {
		t.Fatal("key still held on the server")
	}
}

func TestLockWokenByPush(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m1, m2 := c.Mutex("k"), c.Mutex("k", Weight(5))
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	done := goErr(func() error { return m2.Lock(ctx) })
	n.waitFor(t, "m2 queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "m2.Lock"); err != nil {
		t.Fatalf("m2.Lock: %v", err)
	}
	if o, tok, _ := n.holderOf("k"); o != m2.Owner() || tok != m2.Token() {
		t.Fatalf("server holder %v/%d, want %v/%d", o, tok, m2.Owner(), m2.Token())
	}
	// One Acquire each: the waiter was woken by the push, not by polling.
	if got := n.count(wire.TypeAcquire); got != 2 {
		t.Fatalf("server saw %d acquires, want 2", got)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReentrant(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m := c.Mutex("k")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := m.Token()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("reentrant Lock: %v", err)
	}
	if err := m.TryLock(ctx); err != nil {
		t.Fatalf("reentrant TryLock: %v", err)
	}
	if m.Token() != tok {
		t.Fatalf("token changed: %d -> %d", tok, m.Token())
	}
	if a, r := n.count(wire.TypeAcquire), n.count(wire.TypeRenew); a != 1 || r != 2 {
		t.Fatalf("server saw %d acquires and %d renews, want 1 and 2", a, r)
	}
	for i := 0; i < 2; i++ {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := n.holderOf("k"); !ok {
			t.Fatalf("released after %d of 3 unlocks", i+1)
		}
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.holderOf("k"); ok {
		t.Fatal("still held after the last unlock")
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("extra Unlock: %v", err)
	}
}

func TestProcessOwner(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	c2 := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	h1, h2 := c.Mutex("k", ProcessOwner()), c.Mutex("k", ProcessOwner())
	if h1.Owner() != h2.Owner() {
		t.Fatalf("owners differ: %v %v", h1.Owner(), h2.Owner())
	}
	if err := h1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h2.TryLock(ctx); err != nil {
		t.Fatalf("second process handle: %v", err)
	}
	if h2.Token() != h1.Token() || h1.Token() == 0 {
		t.Fatalf("tokens %d %d", h1.Token(), h2.Token())
	}
	if err := c2.Mutex("k", ProcessOwner()).TryLock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("other client's process owner: %v, want ErrLocked", err)
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.holderOf("k"); !ok {
		t.Fatal("released with one unlock to go")
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.holderOf("k"); ok {
		t.Fatal("still held")
	}
	c.mu.Lock()
	left := len(c.procLocks)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d process cores left after release", left)
	}
}

func TestAutoRenew(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m := c.Mutex("k", TTL(600*time.Millisecond), AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lost := m.Lost()
	n.waitFor(t, "three renewals", func(n *fakeNode) bool { return n.count(wire.TypeRenew) >= 3 })
	if isClosed(lost) {
		t.Fatal("Lost closed while renewals succeed")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.holderOf("k"); ok {
		t.Fatal("still held")
	}
}

func TestLostWhenRenewRefused(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m := c.Mutex("k", TTL(300*time.Millisecond), AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	n.set(func(n *fakeNode) { n.renewStatus = wire.StatusLockDeleted })
	waitClosed(t, m.Lost(), "Lost")
	if m.Held() {
		t.Fatal("Held after loss")
	}
	if err := m.Renew(ctx, 0); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Renew after loss: %v", err)
	}
	if err := m.Lock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("reentrant Lock after loss: %v", err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock after loss: %v, want ErrLockLost", err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}
}

func TestLostWhenRenewalsFail(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m := c.Mutex("k", TTL(300*time.Millisecond), AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	n.set(func(n *fakeNode) { n.dropRenews = true })
	waitClosed(t, m.Lost(), "Lost")
	releases := n.count(wire.TypeRelease)
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock: %v, want ErrLockLost", err)
	}
	// Lost on the client's clock only: Unlock still tries to free it.
	n.waitFor(t, "best-effort release", func(n *fakeNode) bool { return n.count(wire.TypeRelease) > releases })
}

func TestLostPush(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m := c.Mutex("k")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	other := c.Mutex("other")
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	n.revoke("k")
	waitClosed(t, m.Lost(), "Lost")
	if isClosed(other.Lost()) {
		t.Fatal("another lock's Lost closed")
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock: %v", err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRedirectAndViewChange(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2)
	a, b := fc.nodes[0], fc.nodes[1]
	a.set(func(n *fakeNode) { n.redirect = b.addr }) // the view says a; a knows better
	c := newTestClient(t, testConfig(a.addr))
	ctx := tctx(t)

	m := c.Mutex("k1")
	if err := m.TryLock(ctx); err != nil {
		t.Fatalf("TryLock via redirect: %v", err)
	}
	if o, _, ok := b.holderOf("k1"); !ok || o != m.Owner() {
		t.Fatal("lock not taken at the redirect target")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock via redirect: %v", err)
	}

	// The master moves to b: the view push reaches the client, which then
	// goes to b directly.
	fc.setMaster(b)
	deadline := time.After(20 * time.Second)
	for c.View().Version < 2 {
		select {
		case <-deadline:
			t.Fatal("view push not applied")
		case <-time.After(5 * time.Millisecond):
		}
	}
	before := a.count(wire.TypeAcquire)
	m2 := c.Mutex("k2")
	if err := m2.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.count(wire.TypeAcquire); got != before {
		t.Fatalf("old master saw %d more acquires", got-before)
	}
	if _, _, ok := b.holderOf("k2"); !ok {
		t.Fatal("k2 not held at the new master")
	}
}

func TestNoMasterRetried(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	n.set(func(n *fakeNode) { n.noMaster = true })
	cfg := testConfig(n.addr)
	cfg.MaxRetries = 1000
	c := newTestClient(t, cfg)
	ctx := tctx(t)
	done := goErr(func() error { return c.Mutex("k").TryLock(ctx) })
	n.waitFor(t, "retries", func(n *fakeNode) bool { return n.count(wire.TypeAcquire) >= 3 })
	n.set(func(n *fakeNode) { n.noMaster = false })
	if err := recvErr(t, done, "TryLock"); err != nil {
		t.Fatalf("TryLock after election: %v", err)
	}

	// With few retries, the error says why.
	n.set(func(n *fakeNode) { n.noMaster = true })
	cfg.MaxRetries = 2
	c2 := newTestClient(t, cfg)
	if err := c2.Mutex("k2").TryLock(ctx); !errors.Is(err, ErrNoMaster) {
		t.Fatalf("TryLock: %v, want ErrNoMaster", err)
	}
}

// TestOverloadedRetried: a request answered OVERLOADED is sent again
// after at least the answer's RetryAfterMs (try-lock, blocking lock,
// unlock and watch alike), and fails with ErrOverloaded once the
// retries are used up.
func TestOverloadedRetried(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	const refusals, retryAfter = 2, 30 * time.Millisecond
	overload := func() {
		n.set(func(n *fakeNode) { n.overloaded, n.retryAfterMs = refusals, uint32(retryAfter/time.Millisecond) })
	}
	cfg := testConfig(n.addr)
	c := newTestClient(t, cfg)
	ctx := tctx(t)

	// Each call below is answered OVERLOADED twice, then served. The
	// client waits at least RetryAfterMs after each: a lower bound on
	// the time, which a loaded machine only lengthens.
	timed := func(what string, typ wire.Type, f func() error) {
		t.Helper()
		before := n.count(typ)
		overload()
		start := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s after OVERLOADED: %v", what, err)
		}
		if d := time.Since(start); d < refusals*retryAfter {
			t.Errorf("%s: served after %v, before the %v the OVERLOADED answers asked to wait", what, d, refusals*retryAfter)
		}
		if got := n.count(typ) - before; got != refusals+1 {
			t.Errorf("%s: the node saw %d requests, want %d", what, got, refusals+1)
		}
	}
	m := c.Mutex("k")
	timed("TryLock", wire.TypeAcquire, func() error { return m.TryLock(ctx) })
	timed("Unlock", wire.TypeRelease, func() error { return m.Unlock(ctx) })

	// A blocking lock on a held key: OVERLOADED twice, then queued, then
	// granted when the holder lets go.
	holder := c.Mutex("k")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	before := n.count(wire.TypeAcquire)
	overload()
	done := goErr(func() error { return m.Lock(ctx) })
	n.waitFor(t, "the blocked lock queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	if got := n.count(wire.TypeAcquire) - before; got != refusals+1 {
		t.Errorf("blocking Lock: the node saw %d acquires, want %d", got, refusals+1)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "Lock"); err != nil {
		t.Fatalf("blocking Lock after OVERLOADED: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A watch registers once the node takes it.
	var w *Watcher
	timed("Watch", wire.TypeWatch, func() (err error) { w, err = c.Watch(ctx, "k", 0); return err })
	defer w.Close()

	// Always OVERLOADED: the call fails once its retries are spent, with
	// ErrOverloaded.
	n.set(func(n *fakeNode) { n.overloaded, n.retryAfterMs = -1, 1 })
	cfg.MaxRetries = 2
	c2 := newTestClient(t, cfg)
	before = n.count(wire.TypeAcquire)
	if err := c2.Mutex("k2").TryLock(ctx); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("TryLock against a node always OVERLOADED: %v, want ErrOverloaded", err)
	}
	if got := n.count(wire.TypeAcquire) - before; got != 3 {
		t.Errorf("the node saw %d acquires, want 3 (MaxRetries 2)", got)
	}
}

func TestBlockedAcquireFollowsMaster(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2)
	a, b := fc.nodes[0], fc.nodes[1]
	c := newTestClient(t, testConfig(a.addr))
	ctx := tctx(t)

	holder := c.Mutex("k")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("k")
	called := time.Now()
	done := goErr(func() error { return m.Lock(ctx) })
	a.waitFor(t, "queued at a", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	queuedAtA := time.Now()
	a.set(func(n *fakeNode) {
		if got := n.waiters["k"][0].req.WaitedMs; got != 0 {
			t.Errorf("first Acquire's WaitedMs = %d, want 0", got)
		}
	})
	time.Sleep(20 * time.Millisecond) // so that the wait has waited a measurable time

	// b takes over with the key held (by someone it knows).
	x := wire.Owner{Client: 99, ID: 1}
	b.set(func(n *fakeNode) { n.grantLocked("k", x, wire.KindExclusive, 1000, nil) })
	moved := time.Now()
	fc.setMaster(b)
	b.waitFor(t, "re-queued at b", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	requeued := time.Now()
	// The re-send says how long the wait had waited: at least from a's
	// queueing to the master change, at most since Lock was called.
	b.set(func(n *fakeNode) {
		got := time.Duration(n.waiters["k"][0].req.WaitedMs) * time.Millisecond
		if lo, hi := moved.Sub(queuedAtA).Truncate(time.Millisecond), requeued.Sub(called); got < lo || got > hi {
			t.Errorf("re-sent Acquire's WaitedMs = %v, want within [%v, %v]", got, lo, hi)
		}
	})
	b.set(func(n *fakeNode) { n.dropHolderLocked("k", x, wire.EventReleased) })
	if err := recvErr(t, done, "Lock"); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if o, tok, _ := b.holderOf("k"); o != m.Owner() || tok != m.Token() {
		t.Fatalf("b's holder %v/%d, want %v/%d", o, tok, m.Owner(), m.Token())
	}
}

func TestReconnectAfterServerCloses(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m1 := c.Mutex("k")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := c.Mutex("k")
	done := goErr(func() error { return m2.Lock(ctx) })
	n.waitFor(t, "m2 queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	acquires := n.count(wire.TypeAcquire)
	handshakes := n.count(wire.TypeScramClientFinal)

	n.kick() // the server forgets m2's wait with the connection
	n.waitFor(t, "reconnect and re-queue", func(n *fakeNode) bool {
		return n.count(wire.TypeScramClientFinal) > handshakes && n.count(wire.TypeAcquire) > acquires && len(n.waiters["k"]) == 1
	})
	if err := m1.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after reconnect: %v", err)
	}
	if err := recvErr(t, done, "m2.Lock"); err != nil {
		t.Fatalf("m2.Lock: %v", err)
	}
	if err := c.Mutex("other").TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	// The view subscription came back too.
	n.waitFor(t, "re-subscribed", func(n *fakeNode) bool {
		return len(n.subs) > 0
	})
}

func TestCancelWaitOnContextEnd(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m1 := c.Mutex("k")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	m2 := c.Mutex("k")
	done := goErr(func() error { return m2.Lock(wctx) })
	n.waitFor(t, "m2 queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	cancel()
	if err := recvErr(t, done, "m2.Lock"); !errors.Is(err, context.Canceled) {
		t.Fatalf("m2.Lock: %v, want context.Canceled", err)
	}
	n.waitFor(t, "CancelWait", func(n *fakeNode) bool {
		return n.count(wire.TypeCancelWait) == 1 && len(n.waiters["k"]) == 0
	})
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := n.holderOf("k"); ok {
		t.Fatal("key held after the waiter left")
	}
	// The handle is usable again (its operation slot was given back).
	if err := m2.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCancelWaitReleasesRacedGrant(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m1 := c.Mutex("k")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	m2 := c.Mutex("k")
	done := goErr(func() error { return m2.Lock(wctx) })
	n.waitFor(t, "m2 queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	// The grant happens but its push is still "in flight" when the caller
	// gives up.
	n.set(func(n *fakeNode) { n.suppressGranted = true })
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if o, _, _ := n.holderOf("k"); o != m2.Owner() {
		t.Fatal("fake did not grant to m2")
	}
	cancel()
	if err := recvErr(t, done, "m2.Lock"); !errors.Is(err, context.Canceled) {
		t.Fatalf("m2.Lock: %v", err)
	}
	n.waitFor(t, "the raced grant released", func(n *fakeNode) bool {
		l := n.locks["k"]
		return n.count(wire.TypeCancelWait) == 1 && (l == nil || len(l.holders) == 0)
	})
	if m2.Held() || m2.Token() != 0 {
		t.Fatal("m2 claims the lock")
	}
}

func TestLockTimeouts(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	m1 := c.Mutex("k")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	err := c.Mutex("k", MaxWait(50*time.Millisecond)).Lock(ctx)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("MaxWait: %v, want ErrTimeout", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.Mutex("k").Lock(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline: %v, want DeadlineExceeded", err)
	}
	n.waitFor(t, "queue empty", func(n *fakeNode) bool { return len(n.waiters["k"]) == 0 })
}

func TestRWMutex(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	r1, r2, w := c.RWMutex("k"), c.RWMutex("k"), c.RWMutex("k")
	if err := r1.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.TryRLock(ctx); err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if err := w.TryLock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer while read-held: %v", err)
	}
	if err := r1.Lock(ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("upgrade: %v, want ErrInvalid", err)
	}
	st, err := c.State(ctx, "k")
	if err != nil || !st.Held || st.Kind != wire.KindRead || st.Readers != 2 {
		t.Fatalf("State %+v, %v", st, err)
	}
	done := goErr(func() error { return w.Lock(ctx) })
	n.waitFor(t, "writer queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	if err := r1.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "writer"); err != nil {
		t.Fatal(err)
	}
	if w.Writer().Token() == 0 || w.Reader().Token() != 0 {
		t.Fatal("tokens")
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.RUnlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("RUnlock unheld: %v", err)
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	w, err := c.Watch(ctx, "k", 0, Continuous())
	if err != nil {
		t.Fatal(err)
	}
	next := func() Event {
		t.Helper()
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatal("events closed")
			}
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
		}
		return Event{}
	}
	m := c.Mutex("k")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != EventAcquired || ev.Token != m.Token() || ev.Holder != m.Owner() || ev.Key != "k" {
		t.Fatalf("event %+v", ev)
	}
	tok := m.Token()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != EventReleased || ev.Token != tok {
		t.Fatalf("event %+v", ev)
	}

	// After a reconnect the watch is registered again and keeps reporting.
	watches := n.count(wire.TypeWatch)
	n.kick()
	n.waitFor(t, "re-registered watch", func(n *fakeNode) bool {
		return n.count(wire.TypeWatch) > watches && len(n.watches["k"]) == 1
	})
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != EventAcquired || ev.Token != m.Token() {
		t.Fatalf("event after reconnect %+v", ev)
	}
	w.Close()
	if _, ok := <-w.Events(); ok {
		t.Fatal("events not closed after Close")
	}
	n.waitFor(t, "unwatch", func(n *fakeNode) bool { return len(n.watches["k"]) == 0 })

	// A one-shot watch on a key already past the token fires at once and ends.
	w1, err := c.Watch(ctx, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := <-w1.Events()
	if !ok || ev.Type != EventAcquired || ev.Token != m.Token() {
		t.Fatalf("one-shot event %+v %v", ev, ok)
	}
	if _, ok := <-w1.Events(); ok {
		t.Fatal("one-shot watch did not end")
	}
	if w1.Err() != nil {
		t.Fatal(w1.Err())
	}
}

func TestState(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	st, err := c.State(ctx, "k")
	if err != nil || st.Held {
		t.Fatalf("free key: %+v %v", st, err)
	}
	m := c.Mutex("k", TTL(time.Minute))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = c.State(ctx, "k")
	if err != nil || !st.Held || st.Holder != m.Owner() || st.Token != m.Token() || st.TTLLeft <= 0 || st.Kind != wire.KindExclusive {
		t.Fatalf("held key: %+v %v", st, err)
	}
}

func TestElect(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c1 := newTestClient(t, testConfig(n.addr))
	c2 := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	e1 := c1.Election("leader", TTL(time.Minute))
	if err := e1.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	e2 := c2.Election("leader", TTL(time.Minute))
	done := goErr(func() error { return e2.Campaign(ctx, "two") })
	n.waitFor(t, "follower queued", func(n *fakeNode) bool { return len(n.waiters["leader"]) == 1 })
	// A campaign in progress blocks none of the other methods.
	if e2.IsLeader() || e2.Token() != 0 || e2.Resign(ctx) != nil {
		t.Fatal("a candidate still campaigning looks like a leader")
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "second Campaign"); err != nil {
		t.Fatal(err)
	}
	if !e2.IsLeader() || e2.Token() == 0 || e1.IsLeader() {
		t.Fatalf("after resign: e1 leads %v, e2 leads %v token %d", e1.IsLeader(), e2.IsLeader(), e2.Token())
	}
	if err := e1.Proclaim(ctx, "x"); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("proclaim by a follower: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	checks := []struct {
		name string
		err  error
		want []error
	}{
		{"empty key", c.Mutex("").Lock(ctx), []error{ErrInvalid, wire.ErrInvalidKey}},
		{"long key", c.Mutex(strings.Repeat("x", wire.MaxKeyLen+1)).TryLock(ctx), []error{ErrInvalid, wire.ErrInvalidKey}},
		{"empty key unlock", c.Mutex("").Unlock(ctx), []error{ErrInvalid}},
		{"weight 0", c.Mutex("k", Weight(0)).Lock(ctx), []error{ErrInvalid, wire.ErrInvalidWeight}},
		{"weight 11", c.Mutex("k", Weight(11)).Lock(ctx), []error{ErrInvalid}},
		{"negative TTL", c.Mutex("k", TTL(-time.Second)).Lock(ctx), []error{ErrInvalid}},
		{"negative MaxWait", c.Mutex("k", MaxWait(-1)).Lock(ctx), []error{ErrInvalid}},
		{"renew TTL", func() error { m := c.Mutex("k"); return m.Renew(ctx, -1) }(), []error{ErrInvalid}},
		{"renew unheld", c.Mutex("k").Renew(ctx, 0), []error{ErrNotHeld}},
		{"unlock unheld", c.Mutex("k").Unlock(ctx), []error{ErrNotHeld}},
		{"nil mutex", (*Mutex)(nil).Lock(ctx), []error{ErrInvalid}},
		{"zero mutex", (&Mutex{}).Unlock(ctx), []error{ErrInvalid}},
		{"nil rwmutex", (*RWMutex)(nil).RLock(ctx), []error{ErrInvalid}},
		{"zero rwmutex", (&RWMutex{}).Lock(ctx), []error{ErrInvalid}},
		{"nil client", (*Client)(nil).Mutex("k").Lock(ctx), []error{ErrInvalid}},
		{"state empty key", func() error { _, err := c.State(ctx, ""); return err }(), []error{ErrInvalid}},
		{"watch empty key", func() error { _, err := c.Watch(ctx, "", 0); return err }(), []error{ErrInvalid}},
		{"watch bad option", func() error { _, err := c.Watch(ctx, "k", 0, MaxWait(-1)); return err }(), []error{ErrInvalid}},
		{"campaign empty key", c.Election("").Campaign(ctx, "v"), []error{ErrInvalid}},
		{"campaign value too large", c.Election("e").Campaign(ctx, strings.Repeat("v", wire.MaxValueLen+1)), []error{ErrInvalid, wire.ErrValueTooLarge}},
		{"value option too large", c.Mutex("k", Value(strings.Repeat("v", wire.MaxValueLen+1))).Lock(ctx), []error{ErrInvalid, wire.ErrValueTooLarge}},
		{"set value too large", c.Mutex("k").SetValue(ctx, strings.Repeat("v", wire.MaxValueLen+1)), []error{ErrInvalid, wire.ErrValueTooLarge}},
	}
	for _, ck := range checks {
		for _, want := range ck.want {
			if !errors.Is(ck.err, want) {
				t.Errorf("%s: %v, want %v", ck.name, ck.err, want)
			}
		}
	}
	// Methods that return no error do not panic either.
	var nilM *Mutex
	_, _, _, _ = nilM.Token(), nilM.Held(), nilM.Key(), nilM.Owner()
	<-nilM.Lost()
	var nilW *Watcher
	_ = nilW.Close()
	_ = nilW.Err()
	if nilW.Events() != nil {
		t.Error("nil watcher events")
	}
	if n.count(wire.TypeAcquire) != 0 {
		t.Errorf("bad input reached the server")
	}

	for _, cfg := range []Config{
		{},
		{Registry: []string{n.addr}},
		{Registry: []string{n.addr}, Namespace: "bad namespace!"},
		{Registry: []string{"no-port"}, Namespace: fakeNS},
		{Registry: []string{n.addr}, Namespace: fakeNS, Secret: strings.Repeat("s", wire.MaxSecretLen+1)},
	} {
		if _, err := New(ctx, cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v): %v, want ErrInvalid", cfg, err)
		}
	}
}

func TestAuthFailed(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	cfg := testConfig(fc.nodes[0].addr)
	cfg.Secret = "wrong"
	if _, err := New(tctx(t), cfg); !errors.Is(err, ErrAuth) {
		t.Fatalf("New: %v, want ErrAuth", err)
	}
}

func TestBootstrapFallback(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := newTestClient(t, testConfig(dead, fc.nodes[0].addr))
	if err := c.Mutex("k").TryLock(tctx(t)); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(dead)
	cfg.DialTimeout = time.Second
	if _, err := New(tctx(t), cfg); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New with no live node: %v, want ErrUnavailable", err)
	}
}

func TestSubscriptionMovesToAnotherNode(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2)
	a, b := fc.nodes[0], fc.nodes[1]
	fc.setMaster(b)
	c := newTestClient(t, testConfig(a.addr)) // knows only a
	a.close()
	b.waitFor(t, "subscription at b", func(n *fakeNode) bool {
		return len(n.subs) > 0
	})
	if err := c.Mutex("k").TryLock(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestHeartbeatDetectsFrozenNode(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	cfg := testConfig(n.addr)
	// A dial into the frozen node fails its handshake within DialTimeout;
	// the redial after the thaw is then due at once.
	cfg.DialTimeout = time.Second
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	c := newTestClient(t, cfg)
	n.waitFor(t, "heartbeats", func(n *fakeNode) bool { return n.count(wire.TypeHeartbeat) >= 2 })

	n.srv.Freeze(true)
	n.waitFor(t, "client closes the silent connection", func(n *fakeNode) bool { return n.conns() == 0 })
	n.srv.Freeze(false)
	if err := c.Mutex("k").TryLock(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentPipelined(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				m := c.Mutex(fmt.Sprintf("k-%d-%d", g, i%3))
				if err := m.TryLock(ctx); err != nil {
					errs <- err
					return
				}
				if err := m.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Contended grants through the server's queue at the same time.
	shared := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex("hot")
			for i := 0; i < 10; i++ {
				if err := m.Lock(ctx); err != nil {
					errs <- err
					return
				}
				shared++ // guarded by the distributed lock
				if err := m.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if shared != 80 {
		t.Fatalf("shared = %d, want 80", shared)
	}
	c.mu.Lock()
	conns := len(c.conns)
	c.mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d connections to one node, want 1", conns)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c, err := New(tctx(t), testConfig(n.addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t)
	m1 := c.Mutex("k")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, "other", 0, Continuous())
	if err != nil {
		t.Fatal(err)
	}
	done := goErr(func() error { return c.Mutex("k").Lock(ctx) })
	n.waitFor(t, "queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	lost := m1.Lost()
	c.Close()
	if err := recvErr(t, done, "Lock"); !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Lock: %v, want ErrClosed", err)
	}
	// Close released the lock it held (not left for its TTL) and ended
	// the hold first.
	if _, _, held := n.holderOf("k"); held {
		t.Fatal("k still held on the server after Close")
	}
	select {
	case <-lost:
	default:
		t.Fatal("Lost not closed by Close")
	}
	if m1.Held() {
		t.Fatal("Held after Close")
	}
	n.mu.Lock()
	left := len(n.waiters["k"])
	n.mu.Unlock()
	if left != 0 {
		t.Fatalf("waiters of k after Close: %d", left)
	}
	if _, ok := <-w.Events(); ok || !errors.Is(w.Err(), ErrClosed) {
		t.Fatalf("watch after Close: %v", w.Err())
	}
	if err := c.Mutex("x").TryLock(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
	if _, err := c.State(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("State after Close: %v", err)
	}
	c.Close() // idempotent
}

// TestNewTermReregisters: a master that steps down and is elected again
// has forgotten its waits and watches (they live in one term's memory);
// the view shows the same master with a new epoch, and the client sends
// them again.
func TestNewTermReregisters(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)

	w, err := c.Watch(ctx, "watched", 0, Continuous())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	holder := c.Mutex("k")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("k")
	done := goErr(func() error { return m.Lock(ctx) })
	n.waitFor(t, "queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })

	// A new term at the same node: it forgot the wait and the watch.
	n.set(func(n *fakeNode) {
		delete(n.waiters, "k")
		delete(n.watches, "watched")
	})
	fc.setMaster(n)
	n.waitFor(t, "wait and watch sent again", func(n *fakeNode) bool {
		return len(n.waiters["k"]) == 1 && len(n.watches["watched"]) == 1
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "Lock"); err != nil {
		t.Fatalf("Lock after the new term: %v", err)
	}
}

// TestCallAfterRefusalIsErrAuth: once a node refuses the namespace (it was
// removed while the client was connected) and a reconnect of the client's
// own has met that refusal, a call ends with ErrAuth — the node is
// skipped for the reconnect backoff, and skipping it must report its
// refusal, not an unreachable cluster.
func TestCallAfterRefusalIsErrAuth(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	ctx := tctx(t)
	c, err := New(ctx, testConfig(n.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mutex("before").TryLock(ctx); err != nil {
		t.Fatalf("TryLock before the refusal: %v", err)
	}
	n.refusing.Store(true)
	n.kick()
	// The view subscription reconnects by itself and is refused.
	testutil.Eventually(t, 30*time.Second, func() bool { return n.refusals.Load() > 0 }, "a reconnect to be refused")
	if err := c.Mutex("after").TryLock(ctx); !errors.Is(err, ErrAuth) {
		t.Fatalf("TryLock after the refusal: %v, want ErrAuth", err)
	}
}

// TestHolderConnectsToNewMaster: when the view names a new master for a
// group where the client holds a lock, the client opens a connection to
// it without waiting for a request of its own, so that the new master can
// tell it of a loss (a force-unlock, an expiry) over it.
func TestHolderConnectsToNewMaster(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2)
	a, b := fc.nodes[0], fc.nodes[1]
	holder := newTestClient(t, testConfig(a.addr))
	ctx := tctx(t)
	m := holder.Mutex("k", TTL(time.Hour))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.conns(); n != 0 {
		t.Fatalf("b has %d connections before it masters anything", n)
	}
	fc.setMaster(b)
	testutil.Eventually(t, 30*time.Second, func() bool { return b.conns() == 1 }, "the holder's connection to the new master")
	if !m.Held() {
		t.Fatal("the hold ended with the master change")
	}
}
