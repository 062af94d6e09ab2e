package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// memberReport is the part of GET /members the test reads.
type memberReport struct {
	Members []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
	} `json:"members"`
	Groups []struct {
		Group   int   `json:"group"`
		Members []int `json:"members"`
	} `json:"groups"`
}

func (c *cluster) members(p *proc) (memberReport, bool) {
	var rep memberReport
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + p.admin + "/members")
	if err != nil {
		return rep, false
	}
	defer resp.Body.Close()
	return rep, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&rep) == nil
}

// settled reports whether node p's view has id in state (in every group
// when state is "member", in none when "removed").
func (c *cluster) settled(p *proc, id int, state string) bool {
	rep, ok := c.members(p)
	if !ok {
		return false
	}
	found := false
	for _, m := range rep.Members {
		if m.ID == id {
			found = m.State == state
		}
	}
	for _, g := range rep.Groups {
		if slices.Contains(g.Members, id) != (state == "member") {
			return false
		}
	}
	return found
}

// joinNode starts node id with -join at via's admin endpoint.
func (c *cluster) joinNode(id int, via *proc) *proc {
	self := nodeAddrs{ID: id, Peer: freePort(c.t), Client: freePort(c.t)}
	nodes := make([]nodeAddrs, id) // add indexes nodes by id-1
	nodes[id-1] = self
	p := c.addWith(id, nodes, freePort(c.t), []string{"-join", via.admin})
	return p
}

// addWith is add with more flags, the nodes list holding only the node.
func (c *cluster) addWith(id int, nodes []nodeAddrs, admin string, args []string) *proc {
	cfg := map[string]any{
		"node_id":    id,
		"data_dir":   filepath.Join(c.dir, fmt.Sprintf("data%d", id)),
		"nodes":      []nodeAddrs{nodes[id-1]},
		"namespaces": []map[string]string{{"name": "e2e", "secret": "s"}},
		"min_ttl":    "500ms",
		"admin_addr": admin,
	}
	b, _ := json.Marshal(cfg)
	path := filepath.Join(c.dir, fmt.Sprintf("n%d.json", id))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	p := &proc{id: id, cfg: path, addr: nodes[id-1].Client, admin: admin, args: args}
	c.procs = append(c.procs, p)
	c.start(p)
	return p
}

// allServed reports whether the live nodes among ps serve all 15 groups.
func (c *cluster) allServed(ps ...*proc) bool {
	seen := map[int]bool{}
	for _, p := range ps {
		for _, g := range c.servedGroups(p) {
			seen[g] = true
		}
	}
	return len(seen) == 15
}

// TestMembership: a 3-node cluster under a lock workload gets node 4, then
// 5 (paxlockd -join), loses node 1 (removed, then stopped), loses node 2
// to kill -9 and replaces it with node 6, gets node 7 (5 nodes) and keeps
// serving with two of them killed; a wiped node under a known id is
// refused. After each step every group serves again; at the end the
// history is linearizable, tokens increase per key and no two holds of a
// key overlap.
func TestMembership(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the cross-process suites")
	}
	dir := t.TempDir()
	c := newCluster(t, buildPaxlockd(t, dir), dir)
	var nodes []nodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= 3; i++ {
		c.add(i, nodes, nodes[i-1].Admin, "", nil)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(c.dir, "n*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("%s (last lines):\n%s", filepath.Base(l), strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.newClient(ctx)
	defer cl.Close()
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]
	c.waitUntil("the member list installed", 30*time.Second, func() bool { return c.settled(n1, 3, "member") })

	h := &history{base: time.Now()}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	run := make(chan struct{})
	var wg sync.WaitGroup
	runLockWorkers(ctx, cl, h, keys, 6, 3, run, &wg)
	grantsNow := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for _, op := range h.ops {
			if in := op.Input.(lockInput); in.Acquire && op.Output.(lockOutput).OK {
				n++
			}
		}
		return n
	}
	step := func(what string, live ...*proc) {
		t.Helper()
		start := time.Now()
		c.waitUntil(what+": every group served", 30*time.Second, func() bool { return c.allServed(live...) })
		served := time.Since(start)
		before := grantsNow()
		c.waitUntil(what+": clients granted again", 30*time.Second, func() bool { return grantsNow() > before+5 })
		t.Logf("%s: every group served %v after the step, %d grants so far", what, served.Round(time.Millisecond), grantsNow())
	}
	time.Sleep(time.Second)

	n4 := c.joinNode(4, n3)
	c.waitUntil("node 4 a member", 60*time.Second, func() bool { return c.settled(n1, 4, "member") && c.settled(n4, 4, "member") })
	step("add node 4", n1, n2, n3, n4)
	n5 := c.joinNode(5, n2)
	c.waitUntil("node 5 a member", 60*time.Second, func() bool { return c.settled(n1, 5, "member") && c.settled(n5, 5, "member") })
	step("add node 5", n1, n2, n3, n4, n5)

	// del removes node id through via's admin endpoint, retrying while
	// the redirect points at a master that just died (its lease runs).
	del := func(via *proc, id int) {
		t.Helper()
		var last string
		for range 30 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+via.admin+fmt.Sprintf("/members/%d", id), nil)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
			if err != nil {
				last = err.Error()
				time.Sleep(time.Second)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status + " " + string(b)
			time.Sleep(time.Second)
		}
		t.Fatalf("remove node %d: %s", id, last)
	}
	del(n3, 1)
	c.waitUntil("node 1 removed", 60*time.Second, func() bool { return c.settled(n3, 1, "removed") })
	c.stop(n1, 10*time.Second)
	step("remove node 1", n2, n3, n4, n5)

	c.kill(n2)
	del(n4, 2)
	c.waitUntil("node 2 removed", 60*time.Second, func() bool { return c.settled(n3, 2, "removed") })
	n6 := c.joinNode(6, n5)
	c.waitUntil("node 6 a member", 60*time.Second, func() bool { return c.settled(n3, 6, "member") && c.settled(n6, 6, "member") })
	step("replace node 2 with node 6", n3, n4, n5, n6)
	c.kill(n6) // restarted with -join again: it has data, so it restarts as a member
	c.start(n6)
	c.waitUntil("node 6 back", 30*time.Second, func() bool { return len(c.servedGroups(n6)) > 0 })
	step("kill -9 and restart node 6", n3, n4, n5, n6)

	n7 := c.joinNode(7, n3)
	c.waitUntil("node 7 a member", 60*time.Second, func() bool { return c.settled(n3, 7, "member") && c.settled(n7, 7, "member") })
	step("add node 7 (5 nodes)", n3, n4, n5, n6, n7)
	c.kill(n4)
	c.kill(n5)
	step("5 nodes with two killed", n3, n6, n7)

	// A wiped node under a known id is refused and exits.
	if err := os.RemoveAll(filepath.Join(c.dir, "data4")); err != nil {
		t.Fatal(err)
	}
	wiped := c.joinNode(4, n3)
	done := make(chan error, 1)
	go func() { done <- wiped.cmd.Wait() }()
	select {
	case err := <-done:
		wiped.log.Close()
		wiped.cmd = nil
		b, _ := os.ReadFile(filepath.Join(c.dir, "n4.log"))
		if err == nil || !strings.Contains(string(b), "refused") || !strings.Contains(string(b), "new id") {
			t.Errorf("wiped node 4: exit %v, log:\n%s", err, b)
		}
	case <-time.After(30 * time.Second):
		t.Error("a wiped node under a known id was not refused")
	}

	close(run)
	wg.Wait()
	t.Logf("%d operations, %d grants", len(h.ops), grantsNow())
	for _, v := range append(checkTokens(h), checkHolds(h)...) {
		t.Error(v)
	}
	if why := checkLinearizable(lockModel.ToModel(), h.ops, "exclusive", os.TempDir(), t.Logf); why != "" {
		t.Fatal(why)
	}
}
