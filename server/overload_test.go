package server

import (
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// cutOff cuts node i off from every peer (Config.FaultInjection), or
// heals it.
func (tc *testCluster) cutOff(i int, cut bool) {
	s := tc.nodes[i]
	peers := map[paxos.NodeID]bool{}
	if cut {
		for _, n := range s.cfg.Nodes {
			if n.ID != s.cfg.NodeID {
				peers[paxos.NodeID(n.ID)] = true
			}
		}
	}
	s.faults.cut.Store(&peers)
}

// TestMaxInflight: a connection may have max_inflight requests in
// flight. The key's master is cut off from its peers, so what it proposes
// is not chosen while its lease lasts (2 s here) and requests stay in
// flight: the first max_inflight (an acquire, then acquires deferred
// behind it) are held, the next ones are answered OVERLOADED with
// RetryAfterMs at once. Once the held ones are answered, the connection
// takes requests again.
func TestMaxInflight(t *testing.T) {
	t.Parallel()
	const limit = 3
	tc := startClusterWith(t, 3, func(c *Config) {
		c.MaxInflight = limit
		c.FaultInjection = true
		c.Lease = Duration(2 * time.Second)
		c.Heartbeat = Duration(100 * time.Millisecond)
	})
	const key = "inflight"
	mi := tc.masterIndex("ns", key)
	rc := dialRaw(t, tc.cfgs[mi].self().Client)
	rc.hello("ns", "s3cret", 5)
	tc.cutOff(mi, true)
	acq := func(id uint64) *wire.Acquire {
		return &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(5), ID: id}, Weight: 1, TTLMs: 10000}
	}
	var ids []uint64
	for i := range limit + 2 {
		ids = append(ids, rc.send(wire.TypeAcquire, acq(uint64(i+1))))
	}
	held, over := ids[:limit], ids[limit:]
	replies := map[uint64]*wire.Response{}
	answered := func(ids []uint64) bool {
		for _, id := range ids {
			if replies[id] == nil {
				return false
			}
		}
		return true
	}
	readUntil := func(what string, ids []uint64) {
		t.Helper()
		for !answered(ids) {
			f, m, err := rc.read()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if r, ok := m.(*wire.Response); ok && f.ReqID != 0 {
				replies[f.ReqID] = r
			}
		}
	}
	readUntil("the requests beyond max_inflight", over)
	for _, id := range over {
		if r := replies[id]; r.Status != wire.StatusOverloaded || r.RetryAfterMs == 0 {
			t.Errorf("request %d beyond max_inflight: %+v, want OVERLOADED with RetryAfterMs", id, r)
		}
	}
	for _, id := range held {
		if r := replies[id]; r != nil {
			t.Errorf("request %d within max_inflight answered before those beyond it: %+v", id, r)
		}
	}
	tc.cutOff(mi, false)
	readUntil("the held requests", held)
	for _, id := range held {
		if r := replies[id]; r.Status == wire.StatusOverloaded {
			t.Errorf("request %d within max_inflight: %+v", id, r)
		}
	}
	if r := rc.call(wire.TypeState, &wire.State{Key: key}); r.Status == wire.StatusOverloaded {
		t.Fatalf("a request once nothing is in flight: %+v", r)
	}
}

// TestConnBoundsConfigured: max_waits_per_conn, max_watches_per_conn and
// max_prefix_watches_per_conn reach the lock service: on a connection
// allowed one of each, a second blocked acquire, a second watch and a
// second prefix watch are answered OVERLOADED with RetryAfterMs (the
// last naming its bound), while another connection still gets its own.
// A prefix watch sent to a node that does not master its group is
// redirected, and one naming no group is refused BAD_REQUEST.
func TestConnBoundsConfigured(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 3, func(c *Config) {
		c.MaxWaitsPerConn = 1
		c.MaxWatchesPerConn = 1
		c.MaxPrefixWatchesPerConn = 1
	})
	const key = "bounded"
	mi := tc.masterIndex("ns", key)
	addr := tc.cfgs[mi].self().Client
	holder, a, b := dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)
	holder.hello("ns", "s3cret", 1)
	a.hello("ns", "s3cret", 2)
	b.hello("ns", "s3cret", 3)
	if r := holder.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1, TTLMs: 60000}); r.Status != wire.StatusSuccess {
		t.Fatalf("holder: %+v", r)
	}
	wait := func(rc *rawConn, n, id uint64) *wire.Response {
		return rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(n), ID: id}, Weight: 1, TTLMs: 60000,
			MaxWaitMs: wire.WaitForever, WaitID: id})
	}
	watch := func(rc *rawConn, id uint64) *wire.Response {
		return rc.call(wire.TypeWatch, &wire.Watch{Key: key, WatchID: id, Flags: wire.FlagContinuous})
	}
	if r := wait(a, 2, 1); r.Status != wire.StatusLockWait {
		t.Fatalf("first wait: %+v", r)
	}
	if r := wait(a, 2, 2); r.Status != wire.StatusOverloaded || r.RetryAfterMs == 0 {
		t.Fatalf("second wait on the connection: %+v, want OVERLOADED with RetryAfterMs", r)
	}
	if r := watch(a, 1); r.Status != wire.StatusSuccess {
		t.Fatalf("first watch: %+v", r)
	}
	if r := watch(a, 2); r.Status != wire.StatusOverloaded || r.RetryAfterMs == 0 {
		t.Fatalf("second watch on the connection: %+v, want OVERLOADED with RetryAfterMs", r)
	}
	if r := wait(b, 3, 1); r.Status != wire.StatusLockWait {
		t.Fatalf("another connection's wait: %+v", r)
	}
	if r := watch(b, 1); r.Status != wire.StatusSuccess {
		t.Fatalf("another connection's watch: %+v", r)
	}
	g := uint32(wire.GroupOf(wire.KeyHash("ns", key), 15))
	prefix := func(rc *rawConn, id uint64, g uint32) *wire.Response {
		return rc.call(wire.TypeWatch, &wire.Watch{Key: "bound", WatchID: id, Flags: wire.FlagContinuous | wire.FlagPrefix, Group: g})
	}
	if r := prefix(a, 3, g); r.Status != wire.StatusSuccess {
		t.Fatalf("first prefix watch: %+v", r)
	}
	if r := prefix(a, 4, g); r.Status != wire.StatusOverloaded || r.RetryAfterMs == 0 || !strings.Contains(r.Msg, "too many prefix watches on this connection (1)") {
		t.Fatalf("second prefix watch on the connection: %+v, want OVERLOADED naming the bound", r)
	}
	if r := prefix(b, 3, g); r.Status != wire.StatusSuccess {
		t.Fatalf("another connection's prefix watch: %+v", r)
	}
	other := g
	for k := 0; other == g || tc.nodes[mi].svc.Group(group.ID(other)).Serving(); k++ {
		if k > 1000 {
			t.Fatal("every group is served by one node")
		}
		other = uint32(k % 15)
	}
	if r := prefix(a, 5, other); r.Status != wire.StatusMasterRedirect {
		t.Fatalf("prefix watch on a group served elsewhere: %+v, want MASTER_REDIRECT", r)
	}
	if r := prefix(a, 6, 15); r.Status != wire.StatusBadRequest {
		t.Fatalf("prefix watch on group 15 of 15: %+v, want BAD_REQUEST", r)
	}
}
