package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// newLQClient is newClient with local queueing on.
func newLQClient(t testing.TB, tc *testCluster) *client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: testMaxRetries, LocalQueue: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// localGrant is one Lock that returned in a local-queue test.
type localGrant struct {
	name  string
	token uint64
}

// serverQueue returns the length of key's queue on the server.
func serverQueue(t *testing.T, c *client.Client, key string) int {
	t.Helper()
	st, err := c.State(ctxT(t), key)
	if err != nil {
		t.Fatalf("state %q: %v", key, err)
	}
	return st.QueueLen
}

// TestLocalQueueOrderAndTokens: handles of one client that wait for a
// key wait in the client (nothing queued on the server), are handed the
// key in weight then arrival order, and every pass-on has a higher
// token than the hold before it.
func TestLocalQueueOrderAndTokens(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c := newLQClient(t, tc)
	ctx := ctxT(t)
	const key = "lq-order"
	holder := c.Mutex(key)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	first := holder.Token()
	var mu sync.Mutex
	var got []localGrant
	var wg sync.WaitGroup
	specs := []struct {
		name   string
		weight int
	}{{"a", 1}, {"b", 1}, {"heavy", 10}, {"c", 1}}
	for i, s := range specs {
		m := c.Mutex(key, client.Weight(s.weight))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(ctx); err != nil {
				t.Errorf("%s: %v", s.name, err)
				return
			}
			mu.Lock()
			got = append(got, localGrant{s.name, m.Token()})
			mu.Unlock()
			if err := m.Unlock(ctx); err != nil {
				t.Errorf("%s unlock: %v", s.name, err)
			}
		}()
		waitFor(t, fmt.Sprintf("%d local waiters", i+1), func() bool { return c.LocalWaiters(key) == i+1 })
	}
	if n := serverQueue(t, c, key); n != 0 {
		t.Fatalf("%d waiters queued on the server, want 0 (all wait locally)", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []string{"heavy", "a", "b", "c"}
	if len(got) != len(want) {
		t.Fatalf("grants %v", got)
	}
	prev := first
	for i, g := range got {
		if g.name != want[i] {
			t.Fatalf("grant order %v, want %v", got, want)
		}
		if g.token <= prev {
			t.Fatalf("token %d of %s not above %d: %v", g.token, g.name, prev, got)
		}
		prev = g.token
	}
	if st, err := c.State(ctx, key); err != nil || st.Held {
		t.Fatalf("after the last unlock: %+v, %v", st, err)
	}
}

// TestLocalQueueCancel: a local waiter whose context ends leaves the
// local queue; the next one is still served.
func TestLocalQueueCancel(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c := newLQClient(t, tc)
	ctx := ctxT(t)
	const key = "lq-cancel"
	holder := c.Mutex(key)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	quitter, stayer := c.Mutex(key), c.Mutex(key)
	qerr := make(chan error, 1)
	go func() { qerr <- quitter.Lock(cctx) }()
	waitFor(t, "quitter waiting", func() bool { return c.LocalWaiters(key) == 1 })
	serr := make(chan error, 1)
	go func() { serr <- stayer.Lock(ctx) }()
	waitFor(t, "stayer waiting", func() bool { return c.LocalWaiters(key) == 2 })
	cancel()
	if err := <-qerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled local wait: %v, want context.Canceled", err)
	}
	if quitter.Held() {
		t.Fatal("cancelled waiter holds the lock")
	}
	waitFor(t, "one local waiter left", func() bool { return c.LocalWaiters(key) == 1 })
	// MaxWait and a context deadline end a local wait as a timeout.
	if err := c.Mutex(key, client.MaxWait(100*time.Millisecond)).Lock(ctx); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("MaxWait in the local queue: %v, want ErrTimeout", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := c.Mutex(key).Lock(dctx)
	dcancel()
	if !errors.Is(err, client.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline in the local queue: %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if n := c.LocalWaiters(key); n != 1 {
		t.Fatalf("%d local waiters after the timeouts, want 1", n)
	}
	tok := holder.Token()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-serr; err != nil {
		t.Fatal(err)
	}
	if stayer.Token() <= tok {
		t.Fatalf("token %d after %d", stayer.Token(), tok)
	}
	if err := stayer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLocalQueueYieldsToRemoteWaiter: the rule that bounds what local
// pass-ons cost others: a release hands on locally only while nobody
// waits on the server, so a waiter of another client queued there gets
// the key at the very next release, ahead of the local waiters.
func TestLocalQueueYieldsToRemoteWaiter(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c, other := newLQClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	const key = "lq-remote"
	holder := c.Mutex(key)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	grants := make(chan localGrant, 3)
	var wg sync.WaitGroup
	defer wg.Wait()
	lockAndRelease := func(name string, m *client.Mutex) {
		defer wg.Done()
		if err := m.Lock(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		grants <- localGrant{name, m.Token()}
		if err := m.Unlock(ctx); err != nil {
			t.Errorf("%s unlock: %v", name, err)
		}
	}
	wg.Add(3) // one per lockAndRelease
	go lockAndRelease("local1", c.Mutex(key))
	waitFor(t, "local1 waiting", func() bool { return c.LocalWaiters(key) == 1 })
	go lockAndRelease("remote", other.Mutex(key))
	waitFor(t, "remote queued on the server", func() bool { return serverQueue(t, c, key) == 1 })
	go lockAndRelease("local2", c.Mutex(key))
	waitFor(t, "local2 waiting", func() bool { return c.LocalWaiters(key) == 2 })
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var order []localGrant
	for range 3 {
		select {
		case g := <-grants:
			order = append(order, g)
		case <-ctx.Done():
			t.Fatalf("grants so far %v", order)
		}
	}
	if order[0].name != "remote" {
		t.Fatalf("order %v: the remote waiter must come first", order)
	}
	for i := 1; i < len(order); i++ {
		if order[i].token <= order[i-1].token {
			t.Fatalf("tokens not increasing: %v", order)
		}
	}
}

// TestLocalQueueLostHoldPassesOn: when the active holder's lock is lost
// (its TTL ran out without a renewal), the local waiters go on without
// waiting for its Unlock.
func TestLocalQueueLostHoldPassesOn(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c := newLQClient(t, tc)
	ctx := ctxT(t)
	const key = "lq-lost"
	holder := c.Mutex(key, client.TTL(time.Second))
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	next := c.Mutex(key)
	done := make(chan error, 1)
	go func() { done <- next.Lock(ctx) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !isClosedCh(holder.Lost()) {
		t.Fatal("the waiter got the key while the holder's lock was not lost")
	}
	if err := holder.Unlock(ctx); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("unlock of the lost lock: %v", err)
	}
	if !next.Held() {
		t.Fatal("the lost holder's unlock took the key from the next holder")
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func isClosedCh(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestLocalQueueMasterChange: workers of one client contend for one key
// (local queueing and pass-ons) while the key's master is stopped: no
// two hold it at once and tokens strictly increase.
func TestLocalQueueMasterChange(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	const key = "lq-failover"
	victim := tc.masterIndex("ns", key)
	c := newLQClient(t, tc)
	ctx := ctxT(t)
	guard := newGuard()
	var ops atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(key, client.TTL(5*time.Second))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !guard.cycle(ctx, t, m, key, w) {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				ops.Add(1)
			}
		}()
	}
	waitFor(t, "traffic", func() bool { return ops.Load() > 50 })
	tc.stop(victim)
	before := ops.Load()
	waitFor(t, "traffic after the master stopped", func() bool { return ops.Load() > before+50 })
	close(stop)
	wg.Wait()
	if n := guard.overlap.Load(); n > 0 {
		t.Fatalf("%d overlapping holds", n)
	}
	if n := guard.regress.Load(); n > 0 {
		t.Fatalf("%d token regressions", n)
	}
}

// TestLocalQueueClose: Close ends the local waiters with ErrClosed and
// gives the key back.
func TestLocalQueueClose(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c, observer := newLQClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	const key = "lq-close"
	holder := c.Mutex(key)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { errs <- c.Mutex(key).Lock(ctx) }()
		waitFor(t, "local waiters", func() bool { return c.LocalWaiters(key) == i+1 })
	}
	c.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("local waiter at Close: %v, want ErrClosed", err)
		}
	}
	if st, err := observer.State(ctx, key); err != nil || st.Held {
		t.Fatalf("after Close: %+v, %v, want free", st, err)
	}
}
