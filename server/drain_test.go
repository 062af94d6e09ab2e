package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// TestShutdownHandsGroupsOver stops the nodes of a 3-node cluster one
// after the other, each restarted before the next stops (a rolling
// restart), under client load across every group. Each stopping node
// hands the groups it masters to its peers before it stops: when
// Shutdown returns, a peer masters each of them already (without the
// hand-over they would have no master until their leases ran out), and
// no client operation fails.
func TestShutdownHandsGroupsOver(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c := newClient(t, tc)
	ctx := ctxT(t)
	var ops, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := c.Mutex(fmt.Sprintf("rolling-%d-%d", w, i%40), client.TTL(10*time.Second))
				err := m.Lock(ctx)
				if err == nil {
					err = m.Unlock(ctx)
				}
				ops.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for i := range tc.nodes {
		id := paxos.NodeID(tc.cfgs[i].NodeID)
		var mastered []int
		for g, lg := range tc.nodes[i].svc.Groups() {
			if lg.Consensus().Status().Master == id {
				mastered = append(mastered, g)
			}
		}
		tc.stop(i)
		for _, g := range mastered {
			if !servedByPeer(tc, g, id) {
				t.Errorf("node %d stopped; group %d, which it mastered, has no master among its peers", id, g)
			}
		}
		tc.start(i)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := tc.nodes[i].WaitReady(waitCtx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d lock-unlock cycles failed during the rolling restart; first: %v", n, ops.Load(), *firstErr.Load())
	}
	if ops.Load() == 0 {
		t.Fatal("no operation ran")
	}
}

// servedByPeer reports whether a running node other than stopped masters
// group g, as that node sees it.
func servedByPeer(tc *testCluster, g int, stopped paxos.NodeID) bool {
	for j, s := range tc.nodes {
		if s == nil {
			continue
		}
		self := paxos.NodeID(tc.cfgs[j].NodeID)
		if self != stopped && s.svc.Group(group.ID(g)).Consensus().Status().Master == self {
			return true
		}
	}
	return false
}

// TestDrainOnRequest: POST /drain makes a node hand every group it
// masters to its peers and master none afterwards, while it keeps
// running; the answer lists the groups and says they are served.
func TestDrainOnRequest(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	s := tc.nodes[0]
	resp, err := http.Post("http://"+tc.cfgs[0].AdminAddr+"/drain", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d adminapi.Drained
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /drain: %d %v", resp.StatusCode, err)
	}
	if !d.Served || d.Node != tc.cfgs[0].NodeID {
		t.Fatalf("drained: %+v", d)
	}
	// A peer that took a group may lapse for a lease on a loaded machine
	// (another peer then takes it): each group is served by a peer soon,
	// and never again by the drained node.
	for _, g := range d.Groups {
		waitFor(t, fmt.Sprintf("group %d, which node %d mastered, served by a peer", g, d.Node), func() bool {
			return servedByPeer(tc, g, paxos.NodeID(d.Node))
		})
	}
	if m := s.mastered(); len(m) != 0 {
		t.Fatalf("the drained node still masters %v", m)
	}
	// Its clients are served by the others meanwhile.
	c := newClient(t, tc)
	m := c.Mutex("after-drain")
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestDrainMajorityRefused: with one node of three drained, draining a
// second is refused (409 with the reason) — only one node could master
// the groups, and losing it would leave them all masterless — and the
// second node keeps mastering what it did.
func TestDrainMajorityRefused(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	post := func(i int) *http.Response {
		t.Helper()
		resp, err := http.Post("http://"+tc.cfgs[i].AdminAddr+"/drain", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	if resp := post(0); resp.StatusCode != http.StatusOK {
		t.Fatalf("the first drain: HTTP %d", resp.StatusCode)
	}
	before := tc.nodes[1].mastered()
	resp := post(1)
	var body [512]byte
	n, _ := resp.Body.Read(body[:])
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body[:n]), "quorum") {
		t.Fatalf("draining a second node of three: HTTP %d %q, want 409 naming the quorum", resp.StatusCode, body[:n])
	}
	if len(before) > 0 && len(tc.nodes[1].mastered()) == 0 {
		t.Fatal("the refused drain handed the node's groups over")
	}
}

// TestUndrain: DELETE /drain undoes a drain without a restart: the
// drained node masters groups again (placement gives it back those it
// prefers), and once it does, a second node may be drained, which the
// first drain had made refuse.
func TestUndrain(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	call := func(method string, i int) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+tc.cfgs[i].AdminAddr+"/drain", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := call(http.MethodPost, 0); code != http.StatusOK {
		t.Fatalf("drain node 1: HTTP %d", code)
	}
	testutil.Eventually(t, 60*time.Second, func() bool { return len(tc.nodes[0].mastered()) == 0 }, "drained node 1 masters nothing")
	if code := call(http.MethodDelete, 0); code != http.StatusOK {
		t.Fatalf("undrain node 1: HTTP %d", code)
	}
	testutil.Eventually(t, 60*time.Second, func() bool { return len(tc.nodes[0].mastered()) > 0 }, "undrained node 1 masters a group again")
	testutil.Eventually(t, 60*time.Second, func() bool { return tc.nodes[1].drainLeavesQuorum() == nil }, "node 2 drainable once node 1 stays")
	if code := call(http.MethodPost, 1); code != http.StatusOK {
		t.Fatalf("drain node 2 after node 1 was undrained: HTTP %d", code)
	}
}
