package client

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkTryLockUnlock measures acquire+release round trips through one
// multiplexed connection to the in-process fake node (so it measures the
// client and loopback, not a real server).
func BenchmarkTryLockUnlock(b *testing.B) {
	fc := newFakeCluster(b, 1)
	cfg := testConfig(fc.nodes[0].addr)
	c, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench-" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			m := c.Mutex(key)
			if err := m.TryLock(ctx); err != nil {
				b.Error(err)
				return
			}
			if err := m.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
