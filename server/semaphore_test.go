package server

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// TestSemaphoreAgainstCluster: the client's Semaphore against three
// nodes: State, a mismatched total, TryAcquire's error, SetPermits, and
// Close giving permits back at once.
func TestSemaphoreAgainstCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2 := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	a := c1.Semaphore("pool", 3, client.TTL(10*time.Second), client.Value("a"))
	if err := a.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if a.Held() != 2 || a.Token() == 0 {
		t.Fatalf("held %d token %d", a.Held(), a.Token())
	}
	if err := a.Acquire(ctx, 1); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("second acquire on a holding handle: %v", err)
	}
	b := c2.Semaphore("pool", 3)
	var le *client.LockedError
	if err := b.TryAcquire(ctx, 2); !errors.As(err, &le) || le.Permits != 3 || le.InUse != 2 || le.Kind != wire.KindSemaphore {
		t.Fatalf("try 2 of 1 free: %v", err)
	}
	var pe *client.PermitsError
	if err := c2.Semaphore("pool", 5).TryAcquire(ctx, 1); !errors.As(err, &pe) || pe.Have != 3 || pe.Want != 5 || !errors.Is(err, client.ErrPermitsMismatch) {
		t.Fatalf("acquire with another total: %v", err)
	}
	if err := b.TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Permits != 3 || st.InUse != 3 || len(st.Holders) != 2 || st.Holders[0].Permits != 2 || st.Holders[0].Value != "a" ||
		st.Holders[0].Token != a.Token() || st.Holders[1].Token != b.Token() || b.Token() <= a.Token() || st.Holders[0].TTLLeft <= 0 {
		t.Fatalf("state: %+v", st)
	}
	if cs, err := c2.State(ctx, "pool"); err != nil || cs.Kind != wire.KindSemaphore || cs.Permits != 3 || cs.InUse != 3 || cs.Readers != 2 {
		t.Fatalf("client state: %+v %v", cs, err)
	}
	if page, err := c2.List(ctx, "pool", "", 10); err != nil || len(page.Locks) != 1 || page.Locks[0].Permits != 3 || page.Locks[0].InUse != 3 {
		t.Fatalf("list: %+v %v", page, err)
	}
	// Raise the total: a handle with the new count takes the new permit.
	if err := b.SetPermits(ctx, 4); err != nil {
		t.Fatal(err)
	}
	d := c2.Semaphore("pool", 4)
	if err := d.TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Close gives c1's permits back without waiting for the TTL.
	c1.Close()
	waitFor(t, "c1's permits back", func() bool {
		st, err := b.State(ctx)
		return err == nil && st.InUse == 2
	})
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
	semaphorePermitIDs(t, c2, newClient(t, tc))
}

// semaphorePermitIDs: a grant of 3 gives back 2 permits by id and keeps
// its token; a waiter for 2 is granted by that release; ids given back,
// of another token or named twice are refused with nothing changed; the
// last id given back releases the grant.
func semaphorePermitIDs(t *testing.T, c1, c2 *client.Client) {
	ctx := ctxT(t)
	p := c1.Semaphore("tasks", 3, client.TTL(10*time.Second), client.AutoRenew())
	if err := p.Acquire(ctx, 3); err != nil {
		t.Fatal(err)
	}
	ids, tok := p.PermitIDs(), p.Token()
	if len(ids) != 3 || ids[2] != (client.PermitID{Token: tok, Index: 2}) {
		t.Fatalf("permit ids %v, token %d", ids, tok)
	}
	q := c2.Semaphore("tasks", 3)
	got := make(chan error, 1)
	go func() { got <- q.Acquire(ctx, 2) }()
	waitFor(t, "the waiter queued", func() bool {
		st, err := p.State(ctx)
		return err == nil && st.QueueLen == 1
	})
	if err := p.ReleasePermits(ctx, ids[0], ids[2]); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if left := p.PermitIDs(); p.Held() != 1 || p.Token() != tok || len(left) != 1 || left[0] != ids[1] {
		t.Fatalf("after giving back 2: held %d token %d ids %v", p.Held(), p.Token(), left)
	}
	st, err := p.State(ctx)
	if err != nil || st.InUse != 3 || len(st.Holders) != 2 || st.Holders[0].Token != tok || st.Holders[0].Permits != 1 {
		t.Fatalf("state after giving back 2: %+v %v", st, err)
	}
	for name, bad := range map[string][]client.PermitID{
		"given back":    {ids[0]},
		"another token": {{Token: tok + 1, Index: 1}},
		"twice":         {ids[1], ids[1]},
		"none":          nil,
	} {
		if err := p.ReleasePermits(ctx, bad...); !errors.Is(err, client.ErrUnknownPermit) || !errors.Is(err, client.ErrInvalid) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if p.Held() != 1 {
		t.Fatalf("held %d after the refusals", p.Held())
	}
	if err := p.ReleasePermits(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if p.Held() != 0 || p.PermitIDs() != nil {
		t.Fatalf("after the last id: held %d ids %v", p.Held(), p.PermitIDs())
	}
	if err := p.ReleasePermits(ctx, ids[1]); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("release permits after the release: %v", err)
	}
	if st, err := p.State(ctx); err != nil || st.InUse != 2 || len(st.Holders) != 1 {
		t.Fatalf("state at the end: %+v %v", st, err)
	}
}

// TestSemaphoreMasterChange: workers on three clients take 1 or 2 of 3
// permits and give them back while the master of the semaphore's group is
// stopped and restarted. At no moment do the grants the clients hold add
// up to more than 3, and a grant asked for after a release has a higher
// token than the released one.
func TestSemaphoreMasterChange(t *testing.T) {
	t.Parallel()
	const total = 3
	tc := startCluster(t, 3)
	clients := []*client.Client{newClient(t, tc), newClient(t, tc), newClient(t, tc)}
	ctx := ctxT(t)
	var (
		mu       sync.Mutex
		used     int
		released uint64 // highest token of a completed release
		ops      atomic.Int64
		over     atomic.Int64
		regress  atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			s := clients[w%len(clients)].Semaphore("pool", total, client.TTL(10*time.Second), client.AutoRenew())
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + r.IntN(2)
				mu.Lock()
				before := released
				mu.Unlock()
				acquire := s.Acquire
				if r.IntN(3) == 0 {
					acquire = s.TryAcquire
				}
				if err := acquire(ctx, n); err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				tok := s.Token()
				mu.Lock()
				if used += n; used > total {
					over.Add(1)
					t.Errorf("%d permits held by the clients, of %d", used, total)
				}
				if tok <= before {
					regress.Add(1)
					t.Errorf("token %d granted after a release of %d", tok, before)
				}
				mu.Unlock()
				lost := s.Lost()
				time.Sleep(time.Duration(r.IntN(4)) * time.Millisecond) // the work the permits are for
				mu.Lock()
				used -= n
				mu.Unlock()
				if err := s.Release(ctx); err == nil {
					mu.Lock()
					released = max(released, tok)
					mu.Unlock()
				} else if !errors.Is(err, client.ErrLockLost) {
					t.Logf("release: %v", err)
				}
				select {
				case <-lost:
					t.Logf("a grant was lost (token %d)", tok)
				default:
				}
				ops.Add(1)
			}
		}()
	}
	waitFor(t, "traffic", func() bool { return ops.Load() > 30 })
	victim := keyMaster(t, tc, "pool")
	tc.stop(victim)
	before := ops.Load()
	waitFor(t, "traffic after the master change", func() bool { return ops.Load() > before+30 })
	if m := keyMaster(t, tc, "pool"); m == victim {
		t.Fatalf("node %d still masters the semaphore", m)
	}
	tc.start(victim)
	before = ops.Load()
	waitFor(t, "traffic after the restart", func() bool { return ops.Load() > before+30 })
	close(stop)
	wg.Wait()
	if over.Load() > 0 || regress.Load() > 0 {
		t.Fatalf("%d over-grants, %d token regressions", over.Load(), regress.Load())
	}
}
