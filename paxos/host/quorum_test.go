package host

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// syncCount is an Observer that counts a host's synced rounds.
type syncCount struct{ n atomic.Int64 }

func (s *syncCount) InstanceApplied(int)             {}
func (s *syncCount) RoundApplied(int, time.Duration) {}
func (s *syncCount) Synced(time.Duration)            { s.n.Add(1) }
func (s *syncCount) Proposed(time.Duration, bool)    {}

// syncs returns how many rounds node id has synced.
func (tc *testCluster) syncs(id paxos.NodeID) int64 { return tc.nodes[id].obs.(*syncCount).n.Load() }

// TestClusterQuorumSync runs one group with quorum sync on the real host
// and store, each node on a crashable filesystem: under a run of commands
// the non-voter follower fsyncs nothing (its rounds are write-only) while
// the voter fsyncs each round; a crash of the non-voter loses what it
// wrote unsynced; it restarts from what survived, the master stops, and
// the voter and the restarted non-voter elect a master that keeps every
// command chosen before and chooses new ones. Retransmissions are slow
// (5 s), so that a loaded machine does not turn the non-voter into a voter
// mid-run.
func TestClusterQuorumSync(t *testing.T) {
	tc := newTestCluster(t, 3, 1, 0, func(tc *testCluster) {
		tc.quorumSync = true
		tc.retransmit = 500
		for id, nd := range tc.nodes {
			nd.fs, nd.dir = vfs.NewCrashableMem(), fmt.Sprintf("n%d", id)
			nd.obs = &syncCount{}
		}
	})
	master := tc.placed(1, 30*time.Second)
	tc.put(1, "warm", "0")
	var mid paxos.NodeID
	for _, id := range tc.peers {
		tc.waitValue(id, 1, "warm", "0")
		if tc.nodes[id].host.Replica(1) == master {
			mid = id
		}
	}
	before := map[paxos.NodeID]int64{}
	for _, id := range tc.peers {
		before[id] = tc.syncs(id)
	}
	const n = 40
	var last uint64
	for i := range n {
		last = tc.put(1, fmt.Sprintf("k%d", i), fmt.Sprint(i))
	}
	for _, id := range tc.peers {
		tc.waitValue(id, 1, fmt.Sprintf("k%d", n-1), fmt.Sprint(n-1))
	}
	var voter, nonVoter paxos.NodeID
	for _, id := range tc.peers {
		if id == mid {
			continue
		}
		if voter == 0 || tc.syncs(id)-before[id] > tc.syncs(voter)-before[voter] {
			voter, nonVoter = id, voter
		} else {
			nonVoter = id
		}
	}
	dv, dn := tc.syncs(voter)-before[voter], tc.syncs(nonVoter)-before[nonVoter]
	t.Logf("master %d; fsyncs over %d commands: voter %d %d, non-voter %d %d", mid, n, voter, dv, nonVoter, dn)
	if dv < n/2 || dn > 2 {
		t.Fatalf("over %d commands the voter (node %d) synced %d rounds and the non-voter (node %d) %d", n, voter, dv, nonVoter, dn)
	}

	// The non-voter crashes: what it wrote unsynced is gone.
	crashed := tc.nodes[nonVoter].fs.(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{})
	st, err := pebblestore.Open(fmt.Sprintf("n%d", nonVoter), pebblestore.Options{Logger: quietLogger(), FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := st.LoadGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if kept := max(gs.Last, gs.Applied); kept+n/2 > last {
		t.Fatalf("the crashed non-voter kept instances up to %d of %d: it synced what it held write-only", kept, last)
	}
	tc.stop(nonVoter)
	tc.nodes[nonVoter].fs = crashed
	tc.start(nonVoter)
	tc.stop(mid)
	tc.put(1, "after", "1")
	for _, id := range []paxos.NodeID{voter, nonVoter} {
		tc.waitValue(id, 1, "after", "1")
		for i := range n {
			tc.waitValue(id, 1, fmt.Sprintf("k%d", i), fmt.Sprint(i))
		}
	}
}
