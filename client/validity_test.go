package client

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// The tests here check the validity rule for queued grants (doc.go,
// "Validity after a queued grant"): whatever the client counts must end no
// later than the server's deadline, which starts when the server applied
// the grant (or a later renewal). The bounds they assert follow from the
// order of events alone (a grant cannot precede the release that caused
// it; a renewal's send precedes its handling), never from how long
// something took.

// validUntil returns the validity of the hold m has, on the client's clock.
func validUntil(t *testing.T, m *Mutex) time.Time {
	t.Helper()
	lc := m.peek()
	if lc == nil {
		t.Fatal("no lock core")
	}
	lc.mu.Lock()
	h := lc.h
	lc.mu.Unlock()
	if h == nil {
		t.Fatal("the handle holds nothing")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// margin is the part of ttl the client subtracts (Config.ClockDrift).
func margin(c *Client, ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * c.cfg.ClockDrift)
}

// queueBehind takes key with holder, starts waiter.Lock and waits until
// the node has queued it. It returns the time just before waiter.Lock was
// called and the Lock's result channel.
func queueBehind(t *testing.T, n *fakeNode, holder, waiter *Mutex) (time.Time, <-chan error) {
	t.Helper()
	ctx := tctx(t)
	if err := holder.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	done := goErr(func() error { return waiter.Lock(ctx) })
	n.waitFor(t, "the waiter queued", func(n *fakeNode) bool { return len(n.waiters[waiter.Key()]) == 1 })
	return before, done
}

// TestQueuedGrantCountsFromFirstSend: a pass-on well within a third of the
// TTL counts from the wait's first Acquire, not from the push's arrival,
// and needs no renewal; an uncontended Lock needs none either.
func TestQueuedGrantCountsFromFirstSend(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	const ttl = 30 * time.Second

	// Uncontended: answered directly, one Acquire and no Renew.
	solo := c.Mutex("solo", TTL(ttl))
	sent := time.Now()
	if err := solo.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := validUntil(t, solo); got.Before(sent.Add(ttl-margin(c, ttl))) || got.After(time.Now().Add(ttl-margin(c, ttl))) {
		t.Fatalf("direct grant valid until %v, want send time + %v", got, ttl-margin(c, ttl))
	}
	if a, r := n.count(wire.TypeAcquire), n.count(wire.TypeRenew); a != 1 || r != 0 {
		t.Fatalf("an uncontended Lock sent %d acquires and %d renews, want 1 and 0", a, r)
	}

	holder, waiter := c.Mutex("k", TTL(ttl)), c.Mutex("k", TTL(ttl))
	before, done := queueBehind(t, n, holder, waiter)
	released := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "waiter.Lock"); err != nil {
		t.Fatal(err)
	}
	got := validUntil(t, waiter)
	// The first Acquire was sent after before and before the release
	// that caused the grant.
	lo, hi := before.Add(ttl-margin(c, ttl)), released.Add(ttl-margin(c, ttl))
	if got.Before(lo) || got.After(hi) {
		t.Fatalf("queued grant valid until %v, want within [%v, %v] (counted from the first send)", got, lo, hi)
	}
	if r := n.count(wire.TypeRenew); r != 0 {
		t.Fatalf("a quick pass-on sent %d renews, want 0", r)
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQueuedGrantUsesServerTTL: the server clamps a 30s request to 10s;
// the queued grant says so, and the client counts 10s from no later than
// the release that caused the grant (before the fix, 30s from the push).
func TestQueuedGrantUsesServerTTL(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	n.set(func(n *fakeNode) { n.maxTTLMs = 10000 })
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	holder, waiter := c.Mutex("k", TTL(30*time.Second)), c.Mutex("k", TTL(30*time.Second))
	_, done := queueBehind(t, n, holder, waiter)
	released := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "waiter.Lock"); err != nil {
		t.Fatal(err)
	}
	const eff = 10 * time.Second
	if got, limit := validUntil(t, waiter), released.Add(eff); got.After(limit) {
		t.Fatalf("queued grant of a clamped TTL valid until %v, beyond release + %v = %v", got, eff, limit)
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLateGrantConfirmedByRenew: the push arrives after more than a third
// of the (clamped, 600ms) TTL; Lock confirms the grant with a Renew and
// counts from the Renew's send, which the server handled after it.
func TestLateGrantConfirmedByRenew(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	const eff = 600 * time.Millisecond
	n.set(func(n *fakeNode) { n.maxTTLMs = uint32(eff / time.Millisecond); n.holdGranted = true })
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	holder, waiter := c.Mutex("k", TTL(30*time.Second)), c.Mutex("k", TTL(30*time.Second))
	before, done := queueBehind(t, n, holder, waiter)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n.waitFor(t, "the grant", func(n *fakeNode) bool { return len(n.heldGranted) == 1 })
	// The push is late: more than a third of the TTL after the wait began
	// (this waits for time to pass; it synchronizes nothing).
	<-time.After(time.Until(before.Add(eff/3 + 50*time.Millisecond)))
	pushed := time.Now()
	n.releaseGranted()
	if err := recvErr(t, done, "waiter.Lock"); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	renewed := append([]time.Time(nil), n.renewedAt...)
	n.mu.Unlock()
	if len(renewed) != 1 {
		t.Fatalf("%d renews answered, want 1 (the confirmation)", len(renewed))
	}
	got := validUntil(t, waiter)
	if limit := renewed[0].Add(eff); got.After(limit) {
		t.Fatalf("late grant valid until %v, beyond the server's renewal + %v = %v", got, eff, limit)
	}
	if lo := pushed.Add(eff - margin(c, eff)); got.Before(lo) {
		t.Fatalf("late grant valid until %v, want at least %v (counted from the renewal)", got, lo)
	}
	_ = waiter.Unlock(ctx) // may have run out already on the client's clock
}

// TestGrantWithoutTTLConfirmed: a server that does not say the TTL it
// applied (Granted without TTLMs) gets every queued grant confirmed; a
// grant that is gone by then is not reported, and Lock waits again.
func TestGrantWithoutTTLConfirmed(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	n.set(func(n *fakeNode) { n.oldGranted = true; n.maxTTLMs = 10000 })
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	holder, waiter := c.Mutex("k", TTL(30*time.Second)), c.Mutex("k", TTL(30*time.Second))
	_, done := queueBehind(t, n, holder, waiter)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "waiter.Lock"); err != nil {
		t.Fatal(err)
	}
	if r := n.count(wire.TypeRenew); r != 1 {
		t.Fatalf("%d renews, want 1 (the confirmation)", r)
	}
	n.mu.Lock()
	renewed := n.renewedAt[0]
	n.mu.Unlock()
	if got, limit := validUntil(t, waiter), renewed.Add(10*time.Second); got.After(limit) {
		t.Fatalf("valid until %v, beyond the renewal + 10s = %v", got, limit)
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// The grant ends (expires) while its push is held back: the
	// confirmation is refused and Lock queues again, to be granted anew.
	n.set(func(n *fakeNode) { n.holdGranted = true })
	holder2, waiter2 := c.Mutex("k2", TTL(30*time.Second)), c.Mutex("k2", TTL(30*time.Second))
	_, done = queueBehind(t, n, holder2, waiter2)
	if err := holder2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n.waitFor(t, "the grant", func(n *fakeNode) bool { return len(n.heldGranted) == 1 })
	_, first, _ := n.holderOf("k2")
	n.revoke("k2")
	acquires := n.count(wire.TypeAcquire)
	n.releaseGranted()
	if err := recvErr(t, done, "waiter2.Lock"); err != nil {
		t.Fatal(err)
	}
	if got := n.count(wire.TypeAcquire); got != acquires+1 {
		t.Fatalf("%d acquires after the refused confirmation, want 1", got-acquires)
	}
	if o, tok, _ := n.holderOf("k2"); o != waiter2.Owner() || tok != waiter2.Token() || tok == first {
		t.Fatalf("server holder %v/%d, want %v/%d (not the expired grant's %d)", o, tok, waiter2.Owner(), waiter2.Token(), first)
	}
	if err := waiter2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
