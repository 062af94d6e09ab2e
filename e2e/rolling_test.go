package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// latencies collects the durations of lock-unlock cycles by phase.
type latencies struct {
	mu    sync.Mutex
	phase string
	by    map[string][]time.Duration
}

func (l *latencies) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.by[l.phase] = append(l.by[l.phase], d)
	l.mu.Unlock()
}

// summary is "n cycles, p50 …, p99 …, max …" of phase p.
func (l *latencies) summary(p string) string {
	l.mu.Lock()
	ds := slices.Clone(l.by[p])
	l.mu.Unlock()
	if len(ds) == 0 {
		return "no cycles"
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return fmt.Sprintf("%d cycles, p50 %v, p99 %v, max %v", len(ds), at(0.50), at(0.99), ds[len(ds)-1])
}

// TestRollingRestart restarts the three nodes of a cluster (gossip on,
// the default timing) one after the other with SIGTERM, each back and the
// masters spread 5/5/5 again before the next one stops, as an operator
// does, under 64 workers: half take blocking locks on keys two workers
// share, half try-lock fresh keys. A stopping node hands its groups to
// its peers first (drain_timeout), so no request may fail; the test
// reports the cycles' latency during the restarts against the steady
// state before them.
func TestRollingRestart(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the cross-process suite")
	}
	dir := t.TempDir()
	c := newCluster(t, buildPaxlockd(t, dir), dir)
	var nodes []nodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), Gossip: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= 3; i++ {
		c.add(i, nodes, nodes[i-1].Admin, "", nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.newClient(ctx)
	defer cl.Close()
	balanced := func() bool {
		for _, p := range c.procs {
			if len(c.servedGroups(p)) != 5 {
				return false
			}
		}
		return true
	}
	c.waitUntil("masters spread 5/5/5", time.Minute, balanced)

	lat := &latencies{phase: "steady", by: map[string][]time.Duration{}}
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	fail := func(err error) {
		if failed.Add(1) == 1 {
			firstErr.Store(&err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if w%2 == 0 {
					m := cl.Mutex(fmt.Sprintf("shared-%d-%d", w/4, i%8), client.TTL(10*time.Second))
					if err := m.Lock(ctx); err != nil {
						fail(fmt.Errorf("lock: %w", err))
						continue
					}
					if err := m.Unlock(ctx); err != nil {
						fail(fmt.Errorf("unlock: %w", err))
						continue
					}
				} else {
					m := cl.Mutex(fmt.Sprintf("fresh-%d-%d", w, i), client.TTL(10*time.Second))
					err := m.TryLock(ctx)
					if errors.Is(err, client.ErrLocked) {
						fail(fmt.Errorf("try-lock of a fresh key: %w", err))
						continue
					}
					if err != nil {
						fail(fmt.Errorf("try-lock: %w", err))
						continue
					}
					if err := m.Unlock(ctx); err != nil {
						fail(fmt.Errorf("unlock: %w", err))
						continue
					}
				}
				lat.add(time.Since(start))
			}
		}()
	}
	time.Sleep(5 * time.Second) // the steady state's sample
	lat.setPhase("rolling")
	for _, p := range c.procs {
		begin := time.Now()
		c.stop(p, 30*time.Second)
		t.Logf("node %d stopped (SIGTERM) in %v", p.id, time.Since(begin).Round(time.Millisecond))
		c.start(p)
		c.waitUntil(fmt.Sprintf("node %d back and masters spread 5/5/5", p.id), 2*time.Minute, balanced)
		t.Logf("node %d back, masters spread 5/5/5, %v after its SIGTERM", p.id, time.Since(begin).Round(time.Millisecond))
	}
	close(stop)
	wg.Wait()
	t.Logf("steady: %s", lat.summary("steady"))
	t.Logf("rolling restart: %s", lat.summary("rolling"))
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed during the rolling restart; first: %v", n, *firstErr.Load())
	}
}
