package server

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// BenchmarkClientPairs measures acquire+release pairs through the real
// client against three in-process nodes (real gnet, Pebble with fsync,
// loopback TCP), 64 goroutines on fresh keys.
func BenchmarkClientPairs(b *testing.B) {
	tc := startCluster(b, 3)
	runPairs(b, newClient(b, tc))
}

// BenchmarkClientPairsTLS is BenchmarkClientPairs against a cluster whose
// peers use mTLS, through the client listener each mode names:
//
//   - plain: the gnet listener (client);
//   - netpoll: the plain client port on goroutines (client_listener
//     netpoll);
//   - tls: the TLS listener (client_tls_addr, client.Config.TLS);
//   - tls-off: the TLS listener's goroutines without TLS (a test-only
//     switch), so that tls minus tls-off is what TLS itself costs, and
//     tls-off against plain what serving a connection on goroutines
//     instead of gnet's event loops changes.
//
// The nodes run gnet with its default event loops (one per CPU, as
// paxlockd does), not the tests' single loop. Each mode starts its own
// cluster; run each in its own invocation (-bench
// 'ClientPairsTLS/tls$', then '/tls-off', then '/plain') so that none gets
// another's warm-up.
func BenchmarkClientPairsTLS(b *testing.B) {
	for _, mode := range []string{"plain", "netpoll", "tls", "tls-off"} {
		b.Run(mode, func(b *testing.B) {
			tc, dir := startSecureCluster(b, 3, func(c *Config) {
				c.EventLoops = 0
				c.clientTLSOff = mode == "tls-off"
				if mode == "netpoll" {
					c.ClientListener = ListenerNetpoll
				}
			})
			cfg := client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger()}
			if mode == "tls" || mode == "tls-off" {
				cfg.Registry = nil
				for _, n := range tc.cfgs[0].Nodes {
					cfg.Registry = append(cfg.Registry, n.ClientTLS)
				}
			}
			if mode == "tls" {
				cfg.TLS = clientTLS(b, dir)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := client.New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.ResetTimer()
			runPairs(b, c)
		})
	}
}

// runPairs runs b.N acquire+release pairs on c from benchWorkers
// goroutines, on fresh keys.
func runPairs(b *testing.B, c *client.Client) {
	ctx := context.Background()
	workers := benchWorkers()
	lat := make([][]time.Duration, workers)
	var next atomic.Int64
	var errs atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				m := c.Mutex(fmt.Sprintf("bench-%d-%d", w, i), client.TTL(30*time.Second))
				if err := m.TryLock(ctx); err != nil {
					errs.Add(1)
					continue
				}
				if err := m.Unlock(ctx); err != nil {
					errs.Add(1)
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		b.Fatalf("no pair succeeded (%d errors)", errs.Load())
	}
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/el.Seconds(), "pairs/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	if n := errs.Load(); n > 0 {
		b.Logf("%d errors", n)
	}
}

// benchWorkers is 64 unless PAXLOCK_BENCH_WORKERS says otherwise.
func benchWorkers() int {
	if n, err := strconv.Atoi(os.Getenv("PAXLOCK_BENCH_WORKERS")); err == nil && n > 0 {
		return n
	}
	return 64
}
