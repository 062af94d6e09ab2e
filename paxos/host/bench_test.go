package host

import (
	"fmt"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkClusterPropose measures committed commands per second through
// three replicas in one process over loopback TCP and real Pebble with
// fsync, state machines that checkpoint like the lock table (Apply writes
// nothing; a checkpoint every 2048 instances), with 64-byte commands and a fixed number of commands outstanding,
// and the process's CPU time (user and system, all three replicas) per
// committed command. 4096 outstanding shows the batching limit; 64
// outstanding over 15 groups is close to the uncontended 64-worker load of
// make bench, where an instance carries only a few commands and its fixed
// cost dominates. The tls variant runs the peer links with mutual TLS 1.3
// (tcpnet.Config.TLS).
func BenchmarkClusterPropose(b *testing.B) {
	for _, c := range []struct {
		groups, outstanding, inflight int
		tls                           bool
	}{{1, 4096, 0, false}, {15, 4096, 0, false}, {15, 64, 0, false}, {15, 64, 0, true}, {15, 64, 2, false}, {15, 64, 4, false}, {15, 8, 0, false}, {15, 8, 4, false}, {15, 1, 0, false}} {
		name := fmt.Sprintf("groups=%d/outstanding=%d", c.groups, c.outstanding)
		if c.inflight > 0 {
			name += fmt.Sprintf("/inflight=%d", c.inflight)
		}
		if c.tls {
			name += "/tls"
		}
		b.Run(name, func(b *testing.B) {
			benchPropose(b, c.groups, c.outstanding, c.inflight, c.tls)
		})
	}
}

func benchPropose(b *testing.B, groups, outstanding, inflight int, withTLS bool) {
	// b's temp directories and cleanup: each run preallocates WAL files,
	// and a zero testing.T left ~8 GB of them behind per benchmark run.
	tc := newTestCluster(b, 3, groups, 0, func(tc *testCluster) {
		tc.inflight, tc.ckptEvery = inflight, 2048
		if withTLS {
			tc.pki = paxostest.NewPKI(b, "bench")
		}
	})
	masters := make([]*Replica, groups)
	for g := range groups {
		masters[g] = tc.placed(paxos.GroupID(g+1), 30*time.Second)
	}
	cmd := make([]byte, 64)
	lat := make([]time.Duration, b.N)
	var issued, done atomic.Int64
	var wg sync.WaitGroup
	var submit func()
	var errs atomic.Int64
	var firstErr atomic.Pointer[error]
	submit = func() {
		i := issued.Add(1) - 1
		if i >= int64(b.N) {
			return
		}
		wg.Add(1)
		start := time.Now()
		masters[int(i)%groups].Submit(cmd, func(r paxos.Result) {
			if r.Err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, &r.Err)
			}
			lat[i] = time.Since(start)
			done.Add(1)
			submit() // before Done: the count must not touch zero between
			wg.Done()
		})
	}
	b.ResetTimer()
	cpu0 := processCPU()
	begin := time.Now()
	for range min(outstanding, b.N) {
		submit()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if n := errs.Load(); n > 0 {
		// A failed proposal answers at once and the next one follows it:
		// the figures below would describe failures, not commits.
		b.Errorf("%d of %d proposals failed (first: %v): the figures are not valid", n, b.N, *firstErr.Load())
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cmds/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/cmd")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
