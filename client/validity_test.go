package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/server"
	"github.com/paxlock/paxlock/wire"
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

// TestQueuedGrantAgainstServer runs the clamped case against a real
// one-node server: max_ttl 10s, a 30s request, a queued grant. The
// validity must end no later than 10s after the release that caused the
// grant; before Granted carried the TTL, the client counted 30s from the
// push's arrival.
func TestQueuedGrantAgainstServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr := startServer(t, func(cfg *server.Config) {
		cfg.MaxTTL = server.Duration(10 * time.Second)
		cfg.DefaultTTL = server.Duration(10 * time.Second)
	})
	cfg := testConfig(addr)
	cfg.Namespace, cfg.Secret = "ns", "s3cret"
	c := newTestClient(t, cfg)
	ctx := tctx(t)
	holder, waiter := c.Mutex("k", TTL(30*time.Second)), c.Mutex("k", TTL(30*time.Second))
	if err := holder.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	done := goErr(func() error { return waiter.Lock(ctx) })
	awaitQueue(t, c, "k", 1)
	released := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, done, "waiter.Lock"); err != nil {
		t.Fatal(err)
	}
	const eff = 10 * time.Second
	got := validUntil(t, waiter)
	if limit := released.Add(eff); got.After(limit) {
		t.Fatalf("queued grant valid until %v, beyond release + %v = %v (the server's deadline is later than that)", got, eff, limit)
	}
	if lo := before.Add(eff - margin(c, eff)); got.Before(lo) {
		t.Fatalf("queued grant valid until %v, want at least %v", got, lo)
	}
	if !waiter.Held() {
		t.Fatal("Held() is false right after Lock")
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// startServer runs a one-node paxlock server in the process, with
// namespace "ns" (secret "s3cret"), and returns its client address.
func startServer(t *testing.T, tune func(*server.Config)) string {
	t.Helper()
	var s *server.Server
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		// Ports below the ephemeral range, so that no outgoing
		// connection holds one; a taken port is tried again.
		base := 20000 + rand.IntN(10000)
		cfg := server.Config{
			NodeID:     1,
			Nodes:      []server.NodeAddr{{ID: 1, Peer: fmt.Sprintf("127.0.0.1:%d", base), Client: fmt.Sprintf("127.0.0.1:%d", base+1)}},
			DataDir:    t.TempDir(),
			Namespaces: []server.Namespace{{Name: "ns", Secret: "s3cret"}},
			EventLoops: 1,
			Groups:     2,
			Lease:      server.Duration(500 * time.Millisecond),
			Heartbeat:  server.Duration(50 * time.Millisecond),
		}
		if tune != nil {
			tune(&cfg)
		}
		if !portsFree(cfg.Nodes[0].Peer, cfg.Nodes[0].Client) {
			continue
		}
		s, err = server.New(cfg, testLogger())
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = s.Start(ctx)
		if err == nil {
			err = s.WaitReady(ctx)
		}
		cancel()
		if err != nil {
			_ = s.Shutdown(context.Background()) // a node that failed to start: its own error is the one reported
			continue
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("server shutdown: %v", err)
			}
		})
		return cfg.Nodes[0].Client
	}
	t.Fatalf("could not start a server: %v", err)
	return ""
}

func portsFree(addrs ...string) bool {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return false
		}
		lns = append(lns, ln)
	}
	return true
}

// TestCloseReleasesAgainstServer: Close gives back every lock the client
// holds — a mutex, a read lock and an election's leadership — so another
// client takes them at once instead of after their 60 s TTL.
func TestCloseReleasesAgainstServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr := startServer(t, func(cfg *server.Config) {
		cfg.MaxTTL = server.Duration(time.Minute)
	})
	cfg := testConfig(addr)
	cfg.Namespace, cfg.Secret = "ns", "s3cret"
	ctx := tctx(t)
	a := newTestClient(t, cfg)
	m := a.Mutex("m", TTL(time.Minute))
	rw := a.RWMutex("rw", TTL(time.Minute))
	el := a.Election("leader", TTL(time.Minute))
	if err := m.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.TryRLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := el.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	lost := m.Lost()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, lost, "Lost of a mutex released by Close")

	b := newTestClient(t, cfg)
	if err := b.Mutex("m").TryLock(ctx); err != nil {
		t.Fatalf("mutex after the holder's Close: %v", err)
	}
	if err := b.RWMutex("rw").TryLock(ctx); err != nil {
		t.Fatalf("write lock after the reader's Close: %v", err)
	}
	tctxShort, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Election("leader").Campaign(tctxShort, "b"); err != nil {
		t.Fatalf("campaign after the leader's Close: %v", err)
	}
}

// TestRWMutexDowngrade: a writer turns its write lock into a read lock
// without letting a waiting writer in: the token stays, queued readers
// join, the waiting writer gets the key only after every reader left.
func TestRWMutexDowngrade(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr := startServer(t, nil)
	cfg := testConfig(addr)
	cfg.Namespace, cfg.Secret = "ns", "s3cret"
	ctx := tctx(t)
	a, b := newTestClient(t, cfg), newTestClient(t, cfg)
	rw := a.RWMutex("k", TTL(30*time.Second))
	if err := rw.Downgrade(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Downgrade without the write lock: %v, want ErrNotHeld", err)
	}
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := rw.Writer().Token()
	// A writer, then a reader, queue behind the write lock.
	writer := b.RWMutex("k")
	wdone := goErr(func() error { return writer.Lock(ctx) })
	awaitQueue(t, b, "k", 1)
	reader := b.RWMutex("k")
	rdone := goErr(func() error { return reader.RLock(ctx) })
	awaitQueue(t, b, "k", 2)

	if err := rw.Downgrade(ctx); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	if got := rw.Reader().Token(); got != tok || !rw.Reader().Held() || rw.Writer().Held() {
		t.Fatalf("after Downgrade: read token %d held %v, write held %v; want token %d, read side held only", got, rw.Reader().Held(), rw.Writer().Held(), tok)
	}
	st, err := b.State(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != wire.KindRead || st.Token != tok || st.Holder != rw.Reader().Owner() {
		t.Fatalf("state after Downgrade: %+v, want a read hold by %v with token %d", st, rw.Reader().Owner(), tok)
	}
	// The waiting writer is still waiting (and the reader behind it too:
	// waiting writers go first).
	select {
	case err := <-wdone:
		t.Fatalf("the waiting writer got in during a downgrade: %v", err)
	case err := <-rdone:
		t.Fatalf("a reader behind the waiting writer got in: %v", err)
	default:
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatalf("RUnlock after Downgrade: %v", err)
	}
	if err := recvErr(t, wdone, "writer.Lock"); err != nil {
		t.Fatal(err)
	}
	if writer.Writer().Token() <= tok {
		t.Fatalf("writer's token %d not above the downgraded lock's %d", writer.Writer().Token(), tok)
	}
	if err := writer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, rdone, "reader.RLock"); err != nil {
		t.Fatal(err)
	}
}

// awaitQueue waits until key has n waiters.
func awaitQueue(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	var st State
	var err error
	if werr := testutil.Wait(20*time.Second, func() bool {
		st, err = c.State(tctx(t), key)
		return err == nil && st.QueueLen == n
	}); werr != nil {
		t.Fatalf("%v waiting for %d waiters on %q: %+v %v", werr, n, key, st, err)
	}
}
