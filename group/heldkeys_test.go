package group

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/paxlock/paxlock/client/wire"
)

// heldKey is the i-th key BenchmarkHeldKeys holds: 18 bytes, 21 as a
// full key of namespace "ns".
func heldKey(i int) string { return fmt.Sprintf("lock/user-%08d", i) }

// heapNow returns the live heap and its scannable part after a full
// collection.
func heapNow() (live, scan uint64) {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers and sweeps let go
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		scan = s[0].Value.Uint64()
	}
	return ms.HeapAlloc, scan
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHeldKeys measures the live heap a held key costs, in process
// and deterministically: n acquires of distinct keys (one namespace, a
// 1 h TTL, one connection) decided by a serving master's worker over
// fake consensus, so that the lock table, the namespace index and the
// master's deadline slots are filled as on a node, then a checkpoint
// (which empties the dirty set, as the node's periodic one does). It
// reports bytes and GC-scannable bytes per key in all, then per part as
// each is let go in turn: the deadline slots (master only), the
// namespace index, the records, and the map with its key strings (every
// replica), and the process's CPU per full collection (gc-cpu-ms). Run
// with -benchtime=1x -cpu 1: with one P the collection's CPU time is its
// own work, which load beside it adds little to.
func BenchmarkHeldKeys(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint("n=", n), func(b *testing.B) {
			for range b.N {
				heldKeys(b, n)
			}
		})
	}
}

func heldKeys(b *testing.B, n int) {
	r := newWorkerRig(b)
	r.fg.auto = true
	r.master(true)
	s := &lastSink{}
	live0, scan0 := heapNow()
	for i := range n {
		r.request(Request{Op: OpAcquire, Key: heldKey(i), Owner: owner(1, uint64(i+1)), TTL: time.Hour, Sink: s})
		if s.last.Status != wire.StatusSuccess {
			b.Fatalf("acquire %d: %+v", i, s.last)
		}
	}
	r.sm.Checkpoint(nopWriter{})
	if got := r.sm.Count(); got != int64(n) {
		b.Fatalf("held %d keys, want %d", got, n)
	}
	if r.w.times.live != n {
		b.Fatalf("%d deadline slots, want %d", r.w.times.live, n)
	}
	live, scan := heapNow()
	// The CPU a full collection takes with the keys held (its mark work
	// grows with the scannable heap), the process's own CPU time over 5
	// collections, which load beside it does not add to as it adds to
	// the wall time.
	cpu0 := cpuTime()
	for range 5 {
		runtime.GC()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/5000, "gc-cpu-ms")
	per := func(d uint64) float64 { return float64(int64(d)) / float64(n) } // a part may free less than nothing, within noise
	b.ReportMetric(per(live-live0), "B/key")
	b.ReportMetric(per(scan-scan0), "scanB/key")

	// Each part in turn: what letting it go frees.
	part := func(name string, drop func()) {
		drop()
		l, sc := heapNow()
		b.ReportMetric(per(live-l), name+"-B/key")
		b.ReportMetric(per(scan-sc), name+"-scanB/key")
		live, scan = l, sc
	}
	// The deadline slots' arrays, by their capacity; byKey is the rest.
	tt := &r.w.times
	b.ReportMetric(per(uint64(cap(tt.slots))*uint64(unsafe.Sizeof(holdSlot{}))), "slots-B/key")
	b.ReportMetric(per(uint64(cap(tt.keys))), "slotkeys-B/key")
	b.ReportMetric(per(uint64(cap(tt.heap))*4), "heap-B/key")
	part("deadlines", func() { r.w.times = newHoldTimes() })
	sh := r.sm.shards
	part("nsindex", func() {
		for i := range sh {
			sh[i].nsKeys, sh[i].nsFree = nil, nil
		}
	})
	part("records", func() {
		one := &lockRec{}
		for i := range sh {
			for k := range sh[i].locks {
				sh[i].locks[k] = one
			}
		}
	})
	part("map+keys", func() {
		for i := range sh {
			sh[i].locks = nil
		}
	})
	runtime.KeepAlive(r)
}

// BenchmarkFreshPairs measures acquire+release pairs of a fresh key each
// (the uncontended hot path with no key ever reused) by a serving
// master's worker over fake consensus, beside 100k held keys, so that
// the deadline slots, their key bytes and index churn as on a node under
// that load. One op is one pair.
func BenchmarkFreshPairs(b *testing.B) {
	r := newWorkerRig(b)
	r.fg.auto = true
	r.master(true)
	s := &lastSink{}
	const held = 100_000
	for i := range held {
		r.request(Request{Op: OpAcquire, Key: heldKey(i), Owner: owner(1, uint64(i+1)), TTL: time.Hour, Sink: s})
	}
	o := owner(2, 1)
	i := held
	b.ReportAllocs()
	for b.Loop() {
		key := heldKey(i)
		i++
		r.request(Request{Op: OpAcquire, Key: key, Owner: o, TTL: time.Minute, Sink: s})
		if s.last.Status != wire.StatusSuccess {
			b.Fatalf("acquire: %+v", s.last)
		}
		r.request(Request{Op: OpRelease, Key: key, Owner: o, Token: s.last.Token, Sink: s})
		if s.last.Status != wire.StatusSuccess {
			b.Fatalf("release: %+v", s.last)
		}
	}
}
