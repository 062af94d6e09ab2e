package clienttests_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxlocktest"
	"github.com/paxlock/paxlock/server"
)

// The tests here check the client against a one-node cluster where the
// fake node of the client's own tests cannot stand in. The bounds they
// assert follow from the order of events alone (a grant cannot precede
// the release that caused it), never from how long something took.

// testDrift is the clock-drift margin the tests' clients count with.
const testDrift = 0.01

// startNode runs a one-node cluster for t, tuned by tune, and returns
// a configuration for clients of it.
func startNode(t *testing.T, tune func(*server.Config)) client.Config {
	t.Helper()
	c := paxlocktest.NewCluster(t, 1, paxlocktest.Options{Tune: func(cfg *server.Config) {
		cfg.Groups = 2
		cfg.EventLoops = 1
		if tune != nil {
			tune(cfg)
		}
	}})
	cfg := c.ClientConfig()
	cfg.ClockDrift = testDrift
	cfg.RequestTimeout = 5 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(tctx(t), cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

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

// awaitQueue waits until key has n waiters.
func awaitQueue(t *testing.T, c *client.Client, key string, n int) {
	t.Helper()
	var st client.State
	var err error
	if werr := testutil.Wait(20*time.Second, func() bool {
		st, err = c.State(tctx(t), key)
		return err == nil && st.QueueLen == n
	}); werr != nil {
		t.Fatalf("%v waiting for %d waiters on %q: %+v %v", werr, n, key, st, err)
	}
}

// TestQueuedGrantAgainstServer: with max_ttl 10s, a 30s request queued
// behind a holder is granted with the node's 10s, and its validity ends
// no later than 10s after the release that caused the grant (the node's
// deadline starts at the grant, which follows the release), and no
// earlier than 10s less the drift margin after the wait began.
func TestQueuedGrantAgainstServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a node")
	}
	cfg := startNode(t, func(cfg *server.Config) {
		cfg.MaxTTL = server.Duration(10 * time.Second)
		cfg.DefaultTTL = server.Duration(10 * time.Second)
	})
	c := newClient(t, cfg)
	ctx := tctx(t)
	holder, waiter := c.Mutex("k", client.TTL(30*time.Second)), c.Mutex("k", client.TTL(30*time.Second))
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
	got := waiter.ValidUntil()
	if limit := released.Add(eff); got.After(limit) {
		t.Fatalf("queued grant valid until %v, beyond release + %v = %v (the node's deadline is later than that)", got, eff, limit)
	}
	if lo := before.Add(eff - time.Duration(float64(eff)*testDrift)); got.Before(lo) {
		t.Fatalf("queued grant valid until %v, want at least %v", got, lo)
	}
	if !waiter.Held() {
		t.Fatal("Held() is false right after Lock")
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCloseReleasesAgainstServer: Close gives back every lock the client
// holds — a mutex, a read lock and an election's leadership — so another
// client takes them at once instead of after their 60 s TTL.
func TestCloseReleasesAgainstServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a node")
	}
	cfg := startNode(t, func(cfg *server.Config) {
		cfg.MaxTTL = server.Duration(time.Minute)
	})
	ctx := tctx(t)
	a := newClient(t, cfg)
	m := a.Mutex("m", client.TTL(time.Minute))
	rw := a.RWMutex("rw", client.TTL(time.Minute))
	el := a.Election("leader", client.TTL(time.Minute))
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
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for Lost of a mutex released by Close")
	}

	b := newClient(t, cfg)
	if err := b.Mutex("m").TryLock(ctx); err != nil {
		t.Fatalf("mutex after the holder's Close: %v", err)
	}
	if err := b.RWMutex("rw").TryLock(ctx); err != nil {
		t.Fatalf("write lock after the reader's Close: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Election("leader").Campaign(short, "b"); err != nil {
		t.Fatalf("campaign after the leader's Close: %v", err)
	}
}

// TestRWMutexDowngrade: a writer turns its write lock into a read lock
// without letting a waiting writer in: the token stays, queued readers
// join, the waiting writer gets the key only after every reader left.
func TestRWMutexDowngrade(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a node")
	}
	cfg := startNode(t, nil)
	ctx := tctx(t)
	a, b := newClient(t, cfg), newClient(t, cfg)
	rw := a.RWMutex("k", client.TTL(30*time.Second))
	if err := rw.Downgrade(ctx); !errors.Is(err, client.ErrNotHeld) {
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
