package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/gossip"
	"github.com/paxlock/paxlock/internal/testutil"
)

// masterCounts counts, for each node, the groups it serves right now.
func masterCounts(tc *testCluster) map[uint32]int {
	out := map[uint32]int{}
	for _, s := range tc.nodes {
		if s == nil {
			continue
		}
		for _, g := range s.svc.Groups() {
			if g.Serving() {
				out[s.cfg.NodeID]++
			}
		}
	}
	return out
}

// watchTwoMasters samples every node's lease state until stop closes and
// counts the moments at which two nodes held a live lease of one group.
// The returned done closes when the sampling goroutine has returned: the
// cluster's clean-up must not change its nodes before.
func watchTwoMasters(tc *testCluster, stop chan struct{}, mu *sync.Mutex) (bad *atomic.Int64, done <-chan struct{}) {
	bad = new(atomic.Int64)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			serving := map[int]int{}
			for _, s := range tc.nodes {
				if s == nil {
					continue
				}
				for g, lg := range s.svc.Groups() {
					if lg.Consensus().Status().Serving {
						serving[g]++
					}
				}
			}
			mu.Unlock()
			for _, n := range serving {
				if n > 1 {
					bad.Add(1)
				}
			}
			time.Sleep(time.Millisecond) // the sampling period: a monitor, not a wait
		}
	}()
	return bad, finished
}

func TestPlacementSettlesAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	var mu sync.Mutex
	stop := make(chan struct{})
	bad, watched := watchTwoMasters(tc, stop, &mu)
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); <-watched }
	t.Cleanup(halt) // before the cluster's own clean-up, which changes its nodes
	balanced := func() bool {
		mu.Lock()
		defer mu.Unlock()
		c := masterCounts(tc)
		return c[1] == 5 && c[2] == 5 && c[3] == 5
	}
	waitFor(t, "5/5/5 after start", balanced)
	mu.Lock()
	tc.stop(1)
	mu.Unlock()
	waitFor(t, "all groups served by the two left", func() bool {
		mu.Lock()
		defer mu.Unlock()
		c := masterCounts(tc)
		return c[1]+c[3] == 15
	})
	mu.Lock()
	tc.start(1)
	mu.Unlock()
	waitFor(t, "5/5/5 after restart", balanced)
	halt()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d samples saw two live masters of one group", n)
	}
	if err := gossip.CheckBalanced(tc.nodes[0].View()); err != nil {
		// The view follows the masters; give it a moment to catch up.
		waitFor(t, "balanced view", func() bool { return gossip.CheckBalanced(tc.nodes[0].View()) == nil })
	}
}

// A client that knew one address keeps working while that node is down:
// it learned the others from the view, and follows masters by push.
func TestClientOutlivesItsRegistryNode(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	ctx := ctxT(t)
	c, err := client.New(ctx, client.Config{Registry: []string{tc.cfgs[0].Nodes[0].Client}, Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: testMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc.stop(0)
	// Every group, including those node 1 mastered, serves the client.
	for i := range 30 {
		key := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		m := c.Mutex(key)
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := m.Lock(lctx)
		cancel()
		if err != nil {
			t.Fatalf("lock %s with node 1 down: %v", key, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
	// The view a client holds follows pushes, which may trail the
	// answers that proved every group serves: wait for it.
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, gv := range c.View().Groups {
			if gv.Master == 1 {
				return false
			}
		}
		return true
	}, "the client's view still names the stopped node as a master: %+v", c.View())
}
