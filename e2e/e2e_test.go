// Package e2e runs paxlock as separate processes and injects faults: kill -9
// of a node, SIGSTOP pauses longer than a lease, and partitions of a node's
// Paxos traffic from one or both peers (through the nodes' fault-injection
// endpoint), while clients take and release locks. The history is checked by porcupine for linearizability,
// tokens for strict increase per key, and the holds the clients observed
// for overlap on one monotonic clock; what the holders believed they held
// (Held, Lost) is checked for overlaps and beliefs past their validity
// (holderview_test.go).
//
// It runs with `make e2e` (PAXLOCK_E2E=1); `go test ./...` skips it.
// TestChaos (chaos_test.go; make chaos, PAXLOCK_CHAOS=1, root) runs
// randomized fault schedules with every node in its own network namespace.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// lockEveryGroup takes and releases a lock in every group with a client
// that knows only node p, which is cut off from its peers: the client must
// find the masters the other nodes elected although p's view still names
// p for the groups it lost.
func (c *cluster) lockEveryGroup(ctx context.Context, p *proc) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := client.New(ctx, client.Config{Registry: []string{p.addr}, Namespace: "e2e", Secret: "s", Logger: quiet})
	if err != nil {
		c.t.Fatalf("client of node %d: %v", p.id, err)
	}
	defer cl.Close()
	seen := map[int]bool{}
	for i := 0; len(seen) < 15; i++ {
		key := fmt.Sprintf("every-%d", i)
		g := wire.GroupOf(wire.KeyHash("e2e", key), 15)
		if seen[g] {
			continue
		}
		seen[g] = true
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		m := cl.Mutex(key, client.TTL(5*time.Second))
		if err := m.TryLock(lctx); err != nil {
			cancel()
			c.t.Fatalf("group %d, with a client of cut-off node %d: %v", g, p.id, err)
		}
		if err := m.Unlock(lctx); err != nil {
			c.t.Errorf("group %d: unlock: %v", g, err)
		}
		cancel()
	}
}

func TestFaults(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the cross-process fault suite")
	}
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.newClient(ctx)
	defer cl.Close()

	h := &history{base: time.Now()}
	keys := []string{"a", "b", "c", "d"}
	const workers = 8
	run := make(chan struct{})
	var wg sync.WaitGroup
	// Beside the locks, workers share a semaphore of 3 permits.
	sem := &semWorkload{h: &history{base: h.base}, total: 3, key: "sem"}
	sem.run(ctx, cl, 4, workers, run, &wg)
	runLockWorkers(ctx, cl, h, keys, workers, 1, run, &wg)
	// And holders that record what they believe (holderview_test.go),
	// through cl and a second client, with force-unlocks of their keys.
	clHV := c.newClient(ctx)
	defer clHV.Close()
	hv := newHolderView(h.base)
	newHVWorkload(hv, "hv", []*client.Client{cl, clHV}, c.admins).run(ctx, 4, 100, 42, run, &wg)
	logf := func(format string, args ...any) {
		t.Logf(format, args...)
		hv.note(format, args...)
	}

	// Faults: kill -9 and restart, pauses longer than a lease, a node cut
	// off from both peers (its clients still reach it) and a node cut off
	// from one peer only, each longer than a lease.
	rng := rand.New(rand.NewPCG(42, 7))
	for round := range 8 {
		time.Sleep(2 * time.Second)
		p := c.procs[rng.IntN(len(c.procs))]
		var others []int
		for _, q := range c.procs {
			if q != p {
				others = append(others, q.id)
			}
		}
		switch round % 4 {
		case 0:
			logf("kill -9 node %d", p.id)
			c.kill(p)
			time.Sleep(2 * time.Second)
			c.start(p)
			logf("restarted node %d", p.id)
		case 1:
			logf("pause node %d", p.id)
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatalf("pause node %d: %v", p.id, err)
			}
			time.Sleep(2500 * time.Millisecond)
			if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("resume node %d: %v", p.id, err)
			}
			logf("resumed node %d", p.id)
		case 2:
			logf("cut node %d off from nodes %v", p.id, others)
			c.partition(p, others...)
			// The cut-off node gives up every group and the other two
			// serve all of them (a lease and an election later).
			c.waitUntil(fmt.Sprintf("node %d serves nothing and the others serve all", p.id), 20*time.Second, func() bool {
				total := 0
				for _, q := range c.procs {
					if q != p {
						total += len(c.servedGroups(q))
					}
				}
				return len(c.servedGroups(p)) == 0 && total == 15
			})
			c.lockEveryGroup(ctx, p)
			time.Sleep(time.Second)
			c.partition(p)
			logf("healed node %d", p.id)
		case 3:
			logf("cut node %d off from node %d only", p.id, others[0])
			c.partition(p, others[0])
			time.Sleep(3 * time.Second)
			c.partition(p)
			logf("healed node %d", p.id)
		}
	}
	time.Sleep(3 * time.Second)
	close(run)
	wg.Wait()

	// Progress: the service kept granting through the faults.
	grants := 0
	for _, op := range h.ops {
		if in := op.Input.(lockInput); in.Acquire && op.Output.(lockOutput).OK {
			grants++
		}
	}
	t.Logf("%d operations, %d grants", len(h.ops), grants)
	if grants < 50 {
		t.Fatalf("only %d grants during the run", grants)
	}
	for _, v := range append(checkTokens(h), checkHolds(h)...) {
		t.Error(v)
	}
	fail, st := hv.verdict(t.Logf)
	t.Logf("holder view: %v", st)
	for _, v := range fail {
		t.Error(v)
	}
	if st.believed < 20 {
		t.Errorf("holder view: only %d holds believed during the run", st.believed)
	}
	if why := checkLinearizable(lockModel.ToModel(), h.ops, "exclusive", os.TempDir(), t.Logf); why != "" {
		t.Fatal(why)
	}
	t.Logf("history linearizable")
	t.Logf("semaphore: %d operations, %d grants", len(sem.h.ops), sem.grants())
	if n := sem.grants(); n < 20 {
		t.Fatalf("only %d semaphore grants during the run", n)
	}
	for _, v := range append(checkTokens(sem.h), checkPermits(sem.uses, sem.total)...) {
		t.Error(v)
	}
	if why := checkLinearizable(semModel.ToModel(), sem.h.ops, "semaphore", os.TempDir(), t.Logf); why != "" {
		t.Fatal(why)
	}
	t.Logf("semaphore history linearizable")
}
