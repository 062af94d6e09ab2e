package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// TestConsole runs a secure 3-node cluster (admin HTTPS with a token, as
// make run does) and checks what the web console reads: the page and its
// files without the token, /cluster and /events only with it; /cluster
// lists the three nodes reachable and ready, 15 groups with a master and
// three replicas each, the initial master changes, and a key with a
// waiter with its holder; with a node stopped, it is listed unreachable.
func TestConsole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := pki.WriteDev(dir, pki.DevOptions{Cluster: "paxlock", Nodes: 3, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	// /cluster's readiness counts the peers gossip finds alive: with the
	// test clusters' fast probes (GossipLocal, 50 ms) a node starved of
	// CPU declared its live peers dead for over a minute ("no quorum: 1
	// of 3 nodes alive", two busy loops beside -count=3 -parallel 6);
	// the LAN timings wait longer for an ack.
	tc, token, cl := startSecureAdminCluster(t, dir, func(c *Config) { c.GossipTiming = GossipLAN })
	base := "https://" + tc.cfgs[0].AdminAddr
	get := func(path, bearer string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end
		return resp, string(b)
	}
	for path, want := range map[string]string{"/": "text/html", "/console": "text/html", "/console/console.js": "text/javascript", "/console/locks.js": "text/javascript", "/console/console.css": "text/css"} {
		resp, body := get(path, "")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) || len(body) < 100 {
			t.Errorf("GET %s without the token: %s %q (%d bytes), want 200 %s", path, resp.Status, resp.Header.Get("Content-Type"), len(body), want)
		}
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: no same-origin Content-Security-Policy", path)
		}
	}
	if resp, _ := get("/console/nothing.js", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /console/nothing.js without the token: %s, want 401", resp.Status)
	}
	for _, path := range []string{"/cluster", "/events", "/status?detail=1"} {
		if resp, _ := get(path, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %s, want 401", path, resp.Status)
		}
	}

	cluster := func() adminapi.ClusterStatus {
		t.Helper()
		resp, body := get("/cluster", token)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /cluster: %s %q", resp.Status, body)
		}
		var cs adminapi.ClusterStatus
		if err := json.Unmarshal([]byte(body), &cs); err != nil {
			t.Fatalf("decode /cluster: %v", err)
		}
		return cs
	}
	// A node is ready while every group has a serving master: on a
	// loaded machine not before placement has settled (hand-offs and
	// lapsed leases leave groups between masters), waited for here
	// in-process, where a look costs nothing.
	tc.waitBalanced()
	var cs adminapi.ClusterStatus
	testutil.EventuallyWith(t, 60*time.Second, func() (bool, string) {
		cs = cluster()
		var state []string
		ok := len(cs.Nodes) == 3
		for _, n := range cs.Nodes {
			ok = ok && n.Reachable && n.Ready
			state = append(state, fmt.Sprintf("node %d reachable %v ready %v %s", n.ID, n.Reachable, n.Ready, n.ReadyReason))
		}
		return ok, strings.Join(state, "; ")
	}, "/cluster listing three reachable, ready nodes")
	if len(cs.Groups) != 15 {
		t.Fatalf("/cluster lists %d groups, want 15", len(cs.Groups))
	}
	mastered := 0
	for _, g := range cs.Groups {
		if g.Master == 0 || g.Epoch == 0 || len(g.Replicas) != 3 || len(g.Members) != 3 {
			t.Errorf("group %+v: want a master, an epoch, three replicas and three acceptors", g)
		}
		if !g.Serving {
			t.Errorf("group %d: its master's status does not say it serves", g.Group)
		}
	}
	for _, n := range cs.Nodes {
		mastered += n.Mastered
	}
	if mastered != 15 {
		t.Errorf("the nodes master %d groups in all, want 15", mastered)
	}
	if len(cs.MasterChanges) < 15 {
		t.Errorf("%d master changes listed, want at least the 15 first elections", len(cs.MasterChanges))
	}
	for _, c := range cs.MasterChanges {
		if c.To == 0 || c.Epoch == 0 || c.Time.IsZero() {
			t.Errorf("master change %+v", c)
		}
	}
	if len(cs.HotKeys) != 0 {
		t.Errorf("hot keys %+v on an idle cluster", cs.HotKeys)
	}

	// A key held by one client and waited for by another is listed.
	const key = "console-hot"
	tc.masterIndex("ns", key) // placement settled: both connections reach one master
	a := tc.masterConn("ns", key, 1)
	b := tc.masterConn("ns", key, 2)
	r := a.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1, TTLMs: 30000})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	if w := b.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Weight: 1, MaxWaitMs: wire.WaitForever, WaitID: 1}); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", w)
	}
	cs = cluster()
	if len(cs.HotKeys) != 1 {
		t.Fatalf("hot keys %+v, want %s", cs.HotKeys, key)
	}
	hk := cs.HotKeys[0]
	if hk.Namespace != "ns" || hk.Key != key || hk.Waiters != 1 || len(hk.Holders) != 1 ||
		hk.Holders[0].Owner != (wire.Owner{Client: cid(1), ID: 1}).String() || hk.Holders[0].Token != r.Token {
		t.Fatalf("hot key %+v, holders %+v: want %s with one waiter, held by client 1 with token %d", hk, hk.Holders, key, r.Token)
	}
	g := wire.GroupOf(wire.KeyHash("ns", key), 15)
	if cs.Groups[g].Locks != 1 || hk.Group != g {
		t.Errorf("group %d: %d locks, hot key in group %d; want 1 lock, group %d", g, cs.Groups[g].Locks, hk.Group, g)
	}

	// The namespace's counts, the nodes' uptimes and client sessions.
	if want := (adminapi.NamespaceUse{Namespace: "ns", Held: 1, Holders: 1, Waiters: 1}); !slices.Contains(cs.Namespaces, want) {
		t.Errorf("namespaces %+v, want %+v", cs.Namespaces, want)
	}
	sessions := map[string]string{}
	for _, n := range cs.Nodes {
		if n.UptimeMs <= 0 {
			t.Errorf("node %d: uptime %d ms", n.ID, n.UptimeMs)
		}
		for _, c := range n.Clients {
			sessions[c.Client] = c.Namespace
			if c.Remote == "" || c.Connected.IsZero() {
				t.Errorf("node %d: client session %+v without its address or time", n.ID, c)
			}
		}
	}
	for _, c := range []uint64{cid(1), cid(2)} {
		if ns := sessions[strconv.FormatUint(c, 16)]; ns != "ns" {
			t.Errorf("client %x: session in namespace %q, want ns (sessions: %v)", c, ns, sessions)
		}
	}

	// The console's lock page reads the key from its master through node 1.
	resp, body := get("/cluster/locks/ns/"+key, token)
	var d adminapi.LockDetail
	if err := json.Unmarshal([]byte(body), &d); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /cluster/locks/ns/%s: %s %q", key, resp.Status, body)
	}
	if !d.Held || len(d.Holders) != 1 || d.Holders[0].Token != r.Token || len(d.Waiters) != 1 || d.Master != cs.Groups[g].Master {
		t.Errorf("lock page %+v: want held with token %d, one waiter, from node %d", d, r.Token, cs.Groups[g].Master)
	}

	// /events sends the same, as server-sent events.
	req, err := http.NewRequest(http.MethodGet, base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET /events: %s %q", resp.Status, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var ev adminapi.ClusterStatus
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event: %v", err)
			}
			break
		}
	}
	cancel()
	_ = resp.Body.Close() // the stream was cancelled
	if len(ev.Groups) != 15 || len(ev.Nodes) != 3 || len(ev.HotKeys) != 1 {
		t.Fatalf("first event: %d groups, %d nodes, %d hot keys; want 15, 3, 1", len(ev.Groups), len(ev.Nodes), len(ev.HotKeys))
	}

	// A stopped node is listed unreachable, with the reason.
	tc.stop(2)
	testutil.Eventually(t, 60*time.Second, func() bool {
		cs = cluster()
		return !cs.Nodes[2].Reachable && cs.Nodes[2].Error != "" && cs.Nodes[0].Reachable && cs.Nodes[1].Reachable
	}, "node 3 listed unreachable, 1 and 2 reachable")
}

// TestMasterLog: the log keeps the last ConsoleMasterChanges changes,
// newest first, each with the master before it; no master is no change.
func TestMasterLog(t *testing.T) {
	t.Parallel()
	var l masterLog
	l.record(1, paxos.SoftState{})
	if n := len(l.list()); n != 0 {
		t.Fatalf("%d changes after one to no master", n)
	}
	for i := range ConsoleMasterChanges + 5 {
		l.record(1, paxos.SoftState{Master: paxos.NodeID(i%3 + 1), Ballot: paxos.Ballot{Round: uint64(i + 1), Node: paxos.NodeID(i%3 + 1)}})
	}
	got := l.list()
	if len(got) != ConsoleMasterChanges {
		t.Fatalf("%d changes kept, want %d", len(got), ConsoleMasterChanges)
	}
	for i, c := range got {
		round := uint64(ConsoleMasterChanges + 5 - i)
		if c.Epoch != round || c.To != uint32((round-1)%3+1) || c.From != uint32((round-2)%3+1) {
			t.Fatalf("change %d: %+v, want epoch %d", i, c, round)
		}
	}
}

// TestMergeMasterChanges: changes several nodes saw are listed once, at
// the earliest time seen, with a known previous master, newest first.
func TestMergeMasterChanges(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	got := mergeMasterChanges([]adminapi.MasterChange{
		{Time: at(2), Group: 1, From: 0, To: 2, Epoch: 5},
		{Time: at(1), Group: 1, From: 1, To: 2, Epoch: 5},
		{Time: at(3), Group: 2, From: 3, To: 1, Epoch: 7},
		{Time: at(0), Group: 0, From: 0, To: 1, Epoch: 1},
	}, 2)
	want := []adminapi.MasterChange{
		{Time: at(3), Group: 2, From: 3, To: 1, Epoch: 7},
		{Time: at(1), Group: 1, From: 1, To: 2, Epoch: 5},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}
