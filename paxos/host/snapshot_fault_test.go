package host

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// TestClusterSnapshotLoadFailStops: a replica that catches up by a
// snapshot whose load into its state machine fails stops that group (its
// Err names the load failure and matches ErrStopped, it is not serving
// and its proposals fail with that error) instead of serving the partial
// state, while the other replicas go on committing.
func TestClusterSnapshotLoadFailStops(t *testing.T) {
	tc := newTestCluster(t, 3, 1, 20, func(tc *testCluster) {
		tc.failLoads = map[paxos.NodeID]bool{2: true}
	})
	tc.put(1, "before", "1")
	tc.stop(2)
	for i := range 80 {
		tc.put(1, fmt.Sprintf("k%d", i%7), fmt.Sprint(i))
	}
	tc.start(2) // behind the truncated log: catches up by snapshot
	g := tc.nodes[2].host.Replica(1)
	testutil.Eventually(t, 60*time.Second, func() bool { return g.Err() != nil },
		"node 2's group 1 to stop on the failed snapshot load")
	err := g.Err()
	if !errors.Is(err, paxos.ErrStopped) || !errors.Is(err, errLoad) {
		t.Fatalf("Err() = %v, want ErrStopped wrapping the load failure", err)
	}
	if st := g.Status(); st.Serving {
		t.Fatalf("stopped group serving: %+v", st)
	}
	res := make(chan paxos.Result, 1)
	g.Submit([]byte("x=1"), func(r paxos.Result) { res <- r })
	select {
	case r := <-res:
		if !errors.Is(r.Err, errLoad) {
			t.Fatalf("proposal on the stopped group: %v, want the load failure", r.Err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("proposal on the stopped group never answered")
	}
	tc.put(1, "after", "2")
	for _, id := range []paxos.NodeID{1, 3} {
		tc.waitValue(id, 1, "after", "2")
	}
}

// TestClusterUnaskedSnapshotRefused: the first chunk of a snapshot stream
// that a replica did not ask for (a peer's, of an instance far ahead)
// leaves its keyspace as it was: no install begins.
func TestClusterUnaskedSnapshotRefused(t *testing.T) {
	tc := newTestCluster(t, 3, 1, 0)
	tc.put(1, "k", "v")
	tc.waitValue(1, 1, "k", "v")
	n1 := tc.nodes[1]
	n1.host.Deliver([]paxos.Message{{Type: paxos.MsgSnapshot, Group: 1, From: 3, To: 1,
		Instance: 1000, ChunkSeq: 0, Chunk: []byte{}}})
	tc.put(1, "k2", "v2")
	tc.waitValue(1, 1, "k2", "v2")
	found := false
	if err := n1.store.SMReader(1).Scan(nil, func(k, _ []byte) error {
		found = found || string(k) == "k"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("node 1's keyspace lost k after an unasked snapshot chunk")
	}
}
