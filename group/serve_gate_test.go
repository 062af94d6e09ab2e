package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// TestTransferWaitsForAnswers: an explicit mastership transfer does not let the new
// master be elected while an answer given under the old mastership is
// still being made. An integration test on purpose: the order it checks
// is between the lock group and the real paxos runtime (Host). The test holds the group's serve lock for reading, as
// a worker does between its lease check and its answer, and transfers
// the group: the old master stops serving at once, but no other node may
// serve the group until the answer is done.
func TestTransferWaitsForAnswers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{Clock: newFakeClock()})
	const g = 0
	old, svc := c.groupMaster(ID(g))
	lg := svc.Group(ID(g))
	var to paxos.NodeID
	for _, id := range c.peers {
		if id != old {
			to = id
			break
		}
	}
	lg.serve.RLock() // a worker between its lease check and its answer
	c.replica(old, ID(g)).TransferTo(to)
	testutil.Eventually(t, 30*time.Second, func() bool { return !lg.Serving() },
		"node %d to stop serving group %d after the transfer", old, g)
	// The host loop of the old master now waits in masterChanged, before
	// the TimeoutNow leaves: nobody may take the group over meanwhile. The
	// window is well within the old master's lease: once that runs out
	// (the stalled loop renews nothing) the others may elect a master, as
	// after any stall; a TimeoutNow sent too early makes the target
	// campaign within a few ticks. It is a window, not a wait: there is
	// no event to wait for when nothing may happen, and the hosts run on
	// the real clock. Its length is bound both ways: a third of the lease
	// gives the target some 20 ticks to campaign in, far more than a
	// TimeoutNow needs, and ends well before the lease does.
	deadline := time.Now().Add(clusterLeaseTicks * clusterTick / 3)
	for time.Now().Before(deadline) {
		if id, _ := c.findMaster(ID(g)); id != 0 {
			lg.serve.RUnlock()
			t.Fatalf("node %d serves group %d while node %d still answers under its mastership", id, g, old)
		}
		time.Sleep(5 * time.Millisecond)
	}
	lg.serve.RUnlock()
	// Once the answer is done the transfer goes on.
	testutil.Eventually(t, 30*time.Second, func() bool { id, _ := c.findMaster(ID(g)); return id != 0 },
		"a master for group %d after the answer", g)
}

// TestServiceCloseTwice: Close may be called again (it hung: the second
// stop waited for a worker that had already stopped).
func TestServiceCloseTwice(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1, Config{Clock: newFakeClock()})
	svc := c.svc(1)
	done := make(chan struct{})
	go func() {
		svc.Close()
		svc.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a second Service.Close did not return")
	}
}
