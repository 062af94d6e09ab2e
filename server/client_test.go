package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

func newClient(t testing.TB, tc *testCluster) *client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: testMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClientAgainstCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2 := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)

	t.Run("try-lock and tokens", func(t *testing.T) {
		a := c1.Mutex("try", client.TTL(10*time.Second))
		if err := a.TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		b := c2.Mutex("try")
		err := b.TryLock(ctx)
		var le *client.LockedError
		if !errors.As(err, &le) || le.Token != a.Token() {
			t.Fatalf("try-lock of a held key: %v", err)
		}
		first := a.Token()
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		if b.Token() <= first {
			t.Fatalf("token went from %d to %d", first, b.Token())
		}
		if err := b.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("blocking lock woken by release", func(t *testing.T) {
		a := c1.Mutex("block")
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		b := c2.Mutex("block")
		go func() { got <- b.Lock(ctx) }()
		// b waits server-side; the state shows it queued.
		waitFor(t, "b queued", func() bool {
			st, err := c1.State(ctx, "block")
			return err == nil && st.QueueLen == 1
		})
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if b.Token() <= a.Token() {
			t.Fatalf("pass-on token %d not above %d", b.Token(), a.Token())
		}
		if err := b.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("reentrancy", func(t *testing.T) {
		a := c1.Mutex("re")
		if err := a.Lock(ctx); err != nil {
			t.Errorf("Lock: %v", err)
		}
		tok := a.Token()
		if err := a.Lock(ctx); err != nil || a.Token() != tok {
			t.Fatalf("reentrant lock: %v token %d->%d", err, tok, a.Token())
		}
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		if err := c2.Mutex("re").TryLock(ctx); !errors.Is(err, client.ErrLocked) {
			t.Fatalf("after one of two unlocks the key must still be held: %v", err)
		}
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		if st, err := c1.State(ctx, "re"); err != nil || st.Held {
			t.Fatalf("after the last unlock: %+v %v", st, err)
		}
	})

	t.Run("read-write", func(t *testing.T) {
		r1, r2 := c1.RWMutex("rw"), c2.RWMutex("rw")
		if err := r1.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r2.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		w := c2.RWMutex("rw")
		if err := w.TryLock(ctx); !errors.Is(err, client.ErrLocked) {
			t.Fatalf("writer while readers hold: %v", err)
		}
		wrote := make(chan error, 1)
		go func() { wrote <- w.Lock(ctx) }()
		waitFor(t, "writer queued", func() bool {
			st, err := c1.State(ctx, "rw")
			return err == nil && st.QueueLen == 1
		})
		// A waiting writer keeps new readers out.
		if err := c1.RWMutex("rw").TryRLock(ctx); !errors.Is(err, client.ErrLocked) {
			t.Fatalf("reader behind a waiting writer: %v", err)
		}
		if err := r1.RUnlock(ctx); err != nil {
			t.Errorf("RUnlock: %v", err)
		}
		if err := r2.RUnlock(ctx); err != nil {
			t.Errorf("RUnlock: %v", err)
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("weights", func(t *testing.T) {
		h := c1.Mutex("w")
		if err := h.Lock(ctx); err != nil {
			t.Errorf("Lock: %v", err)
		}
		order := make(chan int, 3)
		var wg sync.WaitGroup
		for i, weight := range []int{1, 5, 3} {
			m := c2.Mutex("w", client.Weight(weight))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				order <- weight
				if err := m.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}()
			waitFor(t, "queued", func() bool {
				st, err := c1.State(ctx, "w")
				return err == nil && st.QueueLen == i+1
			})
		}
		if err := h.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		wg.Wait()
		close(order)
		var got []int
		for w := range order {
			got = append(got, w)
		}
		if fmt.Sprint(got) != "[5 3 1]" {
			t.Fatalf("grant order by weight: %v", got)
		}
	})

	t.Run("expiry frees a vanished holder", func(t *testing.T) {
		gone, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		a := gone.Mutex("exp", client.TTL(time.Second))
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		tok := a.Token()
		gone.Close() // no renewals, no release
		b := c2.Mutex("exp")
		if err := b.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if b.Token() <= tok {
			t.Fatalf("token %d after expiry of %d", b.Token(), tok)
		}
		if err := b.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("auto-renew keeps a short lock", func(t *testing.T) {
		// A 4 s TTL renewed every ~1.3 s: a renewal would have to stall for
		// nearly three seconds (a master change on a loaded machine takes
		// a lease and an election) for the lock to go.
		a := c1.Mutex("renew", client.TTL(4*time.Second), client.AutoRenew())
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		// Over two TTLs pass; the lock stays with a.
		deadline := time.Now().Add(9 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-a.Lost():
				t.Fatal("auto-renewed lock was lost")
			case <-time.After(100 * time.Millisecond):
			}
		}
		st, err := c2.State(ctx, "renew")
		if err != nil || !st.Held || st.Token != a.Token() {
			t.Fatalf("state after renewals: %+v %v", st, err)
		}
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		w, err := c2.Watch(ctx, "watched", 0, client.Continuous())
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		a := c1.Mutex("watched")
		if err := a.Lock(ctx); err != nil {
			t.Errorf("Lock: %v", err)
		}
		select {
		case ev := <-w.Events():
			if ev.Token != a.Token() {
				t.Fatalf("watch event %+v, token %d", ev, a.Token())
			}
		case <-ctx.Done():
			t.Fatal("no watch event")
		}
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("wrong token and non-owner change nothing", func(t *testing.T) {
		a := c1.Mutex("owned")
		if err := a.Lock(ctx); err != nil {
			t.Errorf("Lock: %v", err)
		}
		rc := tc.masterConn("ns", "owned", 99)
		if r := rc.callMaster(wire.TypeRelease, &wire.Release{Key: "owned", Owner: wire.Owner{Client: cid(99), ID: 1}, Token: a.Token()}); r.Status != wire.StatusLockChangedOwner {
			t.Fatalf("release by non-owner: %+v", r)
		}
		st, err := c2.State(ctx, "owned")
		if err != nil || st.Token != a.Token() {
			t.Fatalf("state changed: %+v %v", st, err)
		}
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, cond, "%s", what)
}

// holdGuard checks mutual exclusion and token order as the clients see
// them: at most one holder per key, tokens strictly increasing per key.
// A hold is recorded from the moment Lock returns until just before
// Unlock is called, with the holder working in between (see cycle), so
// that a second holder granted during it is counted as an overlap.
type holdGuard struct {
	mu      sync.Mutex
	holder  map[string]int
	last    map[string]uint64
	overlap atomic.Int64
	regress atomic.Int64
	// work is what a holder does while it holds the lock (holdWork
	// unless a test sets it).
	work func()
}

func newGuard() *holdGuard {
	return &holdGuard{holder: map[string]int{}, last: map[string]uint64{}, work: holdWork}
}

// holdWork is a holder's work: it gives up the processor and sleeps a
// little, so that the hold lasts long enough for another worker's
// overlapping grant to land inside it, yet stays far inside the TTL.
func holdWork() {
	for range 3 {
		runtime.Gosched()
	}
	time.Sleep(200 * time.Microsecond)
}

func (g *holdGuard) acquired(key string, who int, tok uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.holder[key]; ok && h != who {
		g.overlap.Add(1)
	}
	g.holder[key] = who
	if tok <= g.last[key] {
		g.regress.Add(1)
	}
	g.last[key] = tok
}

func (g *holdGuard) released(key string, who int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holder[key] == who {
		delete(g.holder, key)
	}
}

// guardedLock is what cycle drives: a *client.Mutex, or a test's
// stand-in.
type guardedLock interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Token() uint64
}

// cycle takes m's lock as worker who, records the hold and its end, and
// gives it back. It reports false when Lock failed; an Unlock that fails
// is only logged (the lock expires after its TTL).
func (g *holdGuard) cycle(ctx context.Context, t *testing.T, m guardedLock, key string, who int) bool {
	if err := m.Lock(ctx); err != nil {
		return false
	}
	g.acquired(key, who, m.Token())
	g.work()
	g.released(key, who)
	if err := m.Unlock(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
		t.Logf("unlock: %v", err)
	}
	return true
}

// sharedLock is a lock that excludes nobody: every Lock succeeds at
// once, with a new token.
type sharedLock struct{ tok atomic.Uint64 }

func (l *sharedLock) Lock(context.Context) error   { l.tok.Add(1); return nil }
func (l *sharedLock) Unlock(context.Context) error { return nil }
func (l *sharedLock) Token() uint64                { return l.tok.Load() }

// TestHoldGuardCatchesOverlap: the guard that TestClientFailover and
// TestLocalQueueMasterChange rely on must see two holds at once. Two
// workers take a lock that excludes nobody, and each one's work waits
// until both are inside their holds: the guard counts the overlap.
func TestHoldGuardCatchesOverlap(t *testing.T) {
	t.Parallel()
	g := newGuard()
	var inside sync.WaitGroup
	inside.Add(2)
	g.work = func() {
		inside.Done()
		inside.Wait()
	}
	lk := &sharedLock{}
	var wg sync.WaitGroup
	for who := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.cycle(context.Background(), t, lk, "k", who)
		}()
	}
	wg.Wait()
	if g.overlap.Load() == 0 {
		t.Fatal("two workers held the key at once and the guard saw no overlap")
	}
}

func TestClientFailover(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c := newClient(t, tc)
	ctx := ctxT(t)
	guard := newGuard()
	var ops atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", (w+i)%6)
				m := c.Mutex(key, client.TTL(5*time.Second))
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
	// Stop the node that masters the most groups.
	victim := 0
	for i, s := range tc.nodes {
		if s.View() != nil && countServing(s) > countServing(tc.nodes[victim]) {
			victim = i
		}
	}
	tc.stop(victim)
	before := ops.Load()
	waitFor(t, "traffic after failover", func() bool { return ops.Load() > before+100 })
	tc.start(victim)
	// The restarted node catches up and takes its groups back.
	waitFor(t, "rebalanced", func() bool { return countServing(tc.nodes[victim]) > 0 })
	before = ops.Load()
	waitFor(t, "traffic after restart", func() bool { return ops.Load() > before+100 })
	close(stop)
	wg.Wait()
	if n := guard.overlap.Load(); n > 0 {
		t.Fatalf("%d overlapping holds", n)
	}
	if n := guard.regress.Load(); n > 0 {
		t.Fatalf("%d token regressions", n)
	}
}

func countServing(s *Server) int {
	if s == nil {
		return -1
	}
	n := 0
	for _, g := range s.svc.Groups() {
		if g.Serving() {
			n++
		}
	}
	return n
}
