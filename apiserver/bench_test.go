package apiserver

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client"
)

// benchWorkers is how many goroutines the benchmarks run at once, as
// make bench's 64 workers.
const benchWorkers = 64

// benchKeys hands each benchmark iteration a key of its own.
var benchKeys atomic.Int64

// BenchmarkAPIAcquireRelease: uncontended try-lock and release pairs
// through node 1's API (Connect protocol, binary, HTTP/1.1), benchWorkers
// at once.
func BenchmarkAPIAcquireRelease(b *testing.B) {
	benchAPI(b)
}

// BenchmarkAPIAcquireReleaseGRPC: the same over gRPC (HTTP/2 without
// TLS).
func BenchmarkAPIAcquireReleaseGRPC(b *testing.B) {
	benchAPI(b, connect.WithGRPC())
}

func benchAPI(b *testing.B, opts ...connect.ClientOption) {
	c := cluster(b)
	ctx := context.Background()
	b.SetParallelism(benchWorkers / max(1, runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		cl := c.client(0, testNS, testSecret, opts...)
		for pb.Next() {
			key := "bench-" + strconv.FormatInt(benchKeys.Add(1), 10)
			a, err := cl.Acquire(ctx, connect.NewRequest(&paxlockv1.AcquireRequest{Key: key, Owner: "o"}))
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: key, Owner: "o", Token: a.Msg.Token})); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkNativeAcquireRelease: the same pairs through the Go client on
// the same cluster, for comparison.
func BenchmarkNativeAcquireRelease(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	var addrs []string
	for _, n := range c.nodes[0].Config().Nodes {
		addrs = append(addrs, n.Client)
	}
	cl, err := client.New(ctx, client.Config{Registry: addrs, Namespace: testNS, Secret: testSecret})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := cl.Mutex("nbench-" + strconv.FormatInt(benchKeys.Add(1), 10))
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
