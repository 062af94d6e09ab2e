package host

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/paxos"
)

// acceptedCount is a Transport that counts the Accepted messages a node
// sends.
type acceptedCount struct {
	next paxos.Transport
	n    atomic.Int64
}

func (a *acceptedCount) Send(msgs []paxos.Message) {
	for i := range msgs {
		if msgs[i].Type == paxos.MsgAccepted {
			a.n.Add(1)
		}
	}
	a.next.Send(msgs)
}

func (a *acceptedCount) Close() error { return a.next.Close() }

// TestMeasureQuorumSyncCounts is a measurement, not a check: it runs
// 3 nodes of 15 groups (the server's default) with quorum sync off and on,
// proposes the same commands with 1 and with 64 concurrent proposers, and
// logs per node the rounds it fsynced, the Accepted messages it sent and
// the bytes its WAL took. It runs only with PAXLOCK_MEASURE_QS=1:
//
//	PAXLOCK_MEASURE_QS=1 go test -count=1 -run TestMeasureQuorumSyncCounts -v ./paxos/host/
func TestMeasureQuorumSyncCounts(t *testing.T) {
	if os.Getenv("PAXLOCK_MEASURE_QS") == "" {
		t.Skip("a measurement: set PAXLOCK_MEASURE_QS=1")
	}
	for _, workers := range []int{1, 64} {
		for _, qs := range []bool{false, true} {
			measureQuorumSync(t, qs, workers, 3000)
		}
	}
}

func measureQuorumSync(t *testing.T, qs bool, workers, cmds int) {
	const groups = 15
	counters := map[paxos.NodeID]*acceptedCount{}
	var mu sync.Mutex
	tc := newTestCluster(t, 3, groups, 0, func(tc *testCluster) {
		tc.quorumSync = qs
		for _, nd := range tc.nodes {
			nd.obs = &syncCount{}
		}
		tc.wrapTr = func(id paxos.NodeID, tr paxos.Transport) paxos.Transport {
			mu.Lock()
			defer mu.Unlock()
			a := &acceptedCount{next: tr}
			counters[id] = a
			return a
		}
	})
	masters := make([]*Replica, groups+1)
	for g := paxos.GroupID(1); g <= groups; g++ {
		masters[g] = tc.placed(g, 60*time.Second)
	}
	type snap struct{ syncs, accepted, wal int64 }
	read := func() map[paxos.NodeID]snap {
		out := map[paxos.NodeID]snap{}
		for _, id := range tc.peers {
			nd := tc.nodes[id]
			out[id] = snap{tc.syncs(id), counters[id].n.Load(), int64(nd.store.Metrics().WAL.BytesWritten)}
		}
		return out
	}
	before := read()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for {
				i := next.Add(1)
				if i > int64(cmds) {
					return
				}
				g := paxos.GroupID(1 + i%groups)
				if _, err := masters[g].Propose(ctx, []byte(fmt.Sprintf("k%d=%d", w, i))); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	after := read()
	var tot snap
	for _, id := range tc.peers {
		d := snap{after[id].syncs - before[id].syncs, after[id].accepted - before[id].accepted, after[id].wal - before[id].wal}
		tot.syncs += d.syncs
		tot.accepted += d.accepted
		tot.wal += d.wal
		t.Logf("quorum_sync=%v workers=%d node %d: %d fsynced rounds, %d Accepted sent, %d WAL bytes", qs, workers, id, d.syncs, d.accepted, d.wal)
	}
	t.Logf("quorum_sync=%v workers=%d: %d commands (%d failed) in %v; all nodes: %d fsynced rounds (%.2f/command), %d Accepted (%.2f/command), %d WAL bytes (%.0f/command)",
		qs, workers, cmds, failed.Load(), took.Round(time.Millisecond), tot.syncs, float64(tot.syncs)/float64(cmds), tot.accepted, float64(tot.accepted)/float64(cmds), tot.wal, float64(tot.wal)/float64(cmds))
	for _, id := range tc.peers {
		tc.stop(id)
	}
}
