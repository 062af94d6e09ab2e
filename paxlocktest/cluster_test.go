package paxlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/paxlocktest"
)

// TestClusterFaults takes a lock on a 3-node test cluster, isolates the
// key's master from its peers and checks that a second client is granted
// the key, with a larger fencing token, by a new master once the first
// hold's TTL has run out, and that the first holder learned its loss
// before that; then stops and restarts a node and takes the lock again.
func TestClusterFaults(t *testing.T) {
	start := time.Now()
	cluster := paxlocktest.NewCluster(t, 3)
	t.Logf("3 nodes ready in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const key = "job-42"
	a := cluster.Client(t).Mutex(key, client.TTL(2*time.Second)) // no renewal: the hold ends with its TTL
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	first := a.Token()
	master := cluster.MasterOf(key)
	if master < 1 || master > 3 {
		t.Fatalf("MasterOf(%q) = %d", key, master)
	}
	if err := cluster.Isolate(master); err != nil {
		t.Fatal(err)
	}
	b := cluster.Client(t).Mutex(key, client.TTL(2*time.Second))
	if err := b.Lock(ctx); err != nil {
		t.Fatalf("second client after isolating master %d: %v", master, err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("a second holder was granted the key before the first learned its loss")
	}
	if b.Token() <= first {
		t.Fatalf("token %d after %d: fencing tokens must increase", b.Token(), first)
	}
	if m := cluster.MasterOf(key); m == master || m == 0 {
		t.Fatalf("MasterOf(%q) = %d after isolating master %d", key, m, master)
	}
	if err := cluster.Heal(master); err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	if err := cluster.StopNode(2); err != nil {
		t.Fatal(err)
	}
	c := cluster.Client(t).Mutex(key, client.TTL(2*time.Second))
	if err := c.Lock(ctx); err != nil {
		t.Fatalf("with node 2 stopped: %v", err)
	}
	if err := c.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.RestartNode(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := cluster.RestartNode(ctx, 2); err == nil {
		t.Fatal("RestartNode of a running node: no error")
	}
	if err := cluster.StopNode(4); !errors.Is(err, paxlocktest.ErrNoNode) {
		t.Fatalf("StopNode(4) of 3 nodes: %v, want ErrNoNode", err)
	}
}
