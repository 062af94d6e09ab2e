package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/freeport"
	"github.com/paxlock/paxlock/internal/testutil"
)

// testLogger is quiet unless PAXLOCK_TEST_LOG is set (testutil.Logger).
func testLogger() *slog.Logger { return testutil.Logger() }

// freePorts returns n loopback addresses for the test's nodes
// (internal/freeport: free a moment ago, each handed to one test only,
// below the ephemeral range).
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := freeport.Loopback(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// testCluster runs n nodes in this process.
type testCluster struct {
	t     testing.TB
	cfgs  []Config
	nodes []*Server
	// hooks are the cluster's nodes' test hooks (every configuration
	// of the cluster points to them, a joiner's too).
	hooks *testHooks
}

func startCluster(t testing.TB, n int) *testCluster {
	return startClusterWith(t, n, nil)
}

// testRelaySecret is the relay secret of the test clusters: their peers
// run without TLS, and their nodes relay with it.
const testRelaySecret = "test-cluster-relay-secret"

// writeRelaySecret writes secret into a file of t's and returns its path.
func writeRelaySecret(t testing.TB, secret string) string {
	path := filepath.Join(t.TempDir(), "relay.secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testLease is the test clusters' lease: long enough that a master on a
// loaded 2-core machine under -race keeps it. At 500 ms, with two busy
// loops beside the package, 15 of its tests failed on masters that lapsed
// (NO_MASTER past the client's retries, groups without a master for a
// minute); at 2 s none did, at the cost of a slower failover in the tests
// that stop a master.
const testLease = 2 * time.Second

// testMaxRetries is the test clients' MaxRetries: with the default backoff
// 40 retries span some 25 s, room for several failovers of testLease on a
// loaded machine (the default 10, about 4 s, is sized for a 500 ms lease).
const testMaxRetries = 40

// startClusterWith starts n nodes, letting tune change each node's
// configuration first. The nodes share a relay secret (testRelaySecret).
func startClusterWith(t testing.TB, n int, tune func(*Config)) *testCluster {
	ports := freePorts(t, 4*n)
	relaySecret := writeRelaySecret(t, testRelaySecret)
	var nodes []NodeAddr
	for i := range n {
		nodes = append(nodes, NodeAddr{ID: uint32(i + 1), Peer: ports[4*i], Client: ports[4*i+1], Gossip: ports[4*i+2], Admin: ports[4*i+3]})
	}
	tc := &testCluster{t: t, hooks: &testHooks{}}
	for i := range n {
		cfg := Config{
			NodeID:     uint32(i + 1),
			Nodes:      nodes,
			AdminAddr:  nodes[i].Admin,
			DataDir:    t.TempDir(),
			Namespaces: []Namespace{{Name: "ns", Secret: "s3cret"}, {Name: "other", Secret: "x"}},
			EventLoops: 1,
			// PAXLOCK_TEST_CLIENT_LISTENER runs the suite on another
			// client listener (gnet); default netpoll.
			ClientListener:  os.Getenv("PAXLOCK_TEST_CLIENT_LISTENER"),
			Lease:           Duration(testLease),
			Heartbeat:       Duration(testLease / 10),
			GossipTiming:    GossipLocal,
			RelaySecretFile: relaySecret,
			hooks:           tc.hooks,
		}
		if tune != nil {
			tune(&cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
		tc.nodes = append(tc.nodes, nil)
		tc.start(i)
	}
	t.Cleanup(func() {
		for i := range tc.nodes {
			if tc.nodes[i] != nil {
				tc.stop(i)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range tc.nodes {
		if err := s.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return tc
}

func (tc *testCluster) start(i int) {
	// A restarted node may find its ports still held for a moment by the
	// one it replaces: try again for a while.
	testutil.EventuallyWith(tc.t, 30*time.Second, func() (bool, string) {
		s, err := New(tc.cfgs[i], testLogger())
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = s.Start(ctx)
			cancel()
			if err == nil {
				tc.nodes[i] = s
				return true, ""
			}
			_ = s.Shutdown(context.Background()) // a node that failed to start: its own error is the one reported
		}
		return false, err.Error()
	}, "node %d to start", i+1)
}

func (tc *testCluster) stop(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tc.nodes[i].Shutdown(ctx); err != nil {
		tc.t.Logf("shutdown node %d: %v", i+1, err)
	}
	tc.nodes[i] = nil
}

func (tc *testCluster) clientAddrs() []string {
	var out []string
	for _, n := range tc.cfgs[0].Nodes {
		out = append(out, n.Client)
	}
	return out
}

// testKey is test client n's client key, cid(n) its client id (see
// wire.ClientIDOf).
func testKey(n uint64) string { return fmt.Sprintf("test-client-key-%04x", n) }

func cid(n uint64) uint64 { return wire.ClientIDOf(testKey(n)) }

// masterConn returns a connection, authenticated, to the master of key,
// waiting for the group to have one (a group may be between masters for
// a moment after a start or a restart).
func (tc *testCluster) masterConn(ns, key string, client uint64) *rawConn {
	tc.t.Helper()
	if !slices.Contains(tc.nodes, nil) && 15%len(tc.nodes) == 0 {
		// Placement settles first, so that the master found here does
		// not hand the group to its preferred node before the call.
		tc.masterIndex(ns, key)
	}
	g := wire.GroupOf(wire.KeyHash(ns, key), 15)
	var master *Server
	waitFor(tc.t, "a master for "+key, func() bool {
		for _, s := range tc.nodes {
			if s != nil && s.svc.Group(group.ID(g)).Serving() {
				master = s
				return true
			}
		}
		return false
	})
	rc := dialRaw(tc.t, master.cfg.self().Client)
	if r := rc.hello(ns, "s3cret", client); r.Status != wire.StatusSuccess {
		tc.t.Fatalf("hello: %+v", r)
	}
	return rc
}

func TestServerLockAndRedirect(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	key := "order:42"
	// Placement settles first: the groups this test finds by Serving must
	// not move to their preferred nodes between the look and the call.
	tc.masterIndex("ns", key)
	rc := tc.masterConn("ns", key, 7)
	r := rc.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(7), ID: 1}, Weight: 1, TTLMs: 10000})
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("acquire: %+v", r)
	}
	// Another node redirects to the master. A node that answers otherwise
	// must have become the master meanwhile (a lease lapsed): the check
	// is made again of a node that is not.
	g := wire.GroupOf(wire.KeyHash("ns", key), 15)
	redirected := false
	for try := 0; !redirected; try++ {
		for _, s := range tc.nodes {
			if s.svc.Group(group.ID(g)).Serving() {
				continue
			}
			oc := dialRaw(t, s.cfg.self().Client)
			oc.hello("ns", "s3cret", 8)
			r := oc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(8), ID: 1}, Weight: 1})
			redirected = r.Status == wire.StatusMasterRedirect && r.Redirect != ""
			if !redirected && (try == 2 || !s.svc.Group(group.ID(g)).Serving()) {
				t.Fatalf("non-master node %d answered %+v", s.cfg.NodeID, r)
			}
			break
		}
	}
	// Keys of another namespace never collide.
	oc := dialRaw(t, tc.nodes[0].cfg.self().Client)
	if r := oc.hello("other", "x", 9); r.Status != wire.StatusSuccess {
		t.Fatalf("hello other: %+v", r)
	}
	og := wire.GroupOf(wire.KeyHash("other", key), 15)
	for _, s := range tc.nodes {
		if s.svc.Group(group.ID(og)).Serving() {
			c := dialRaw(t, s.cfg.self().Client)
			c.hello("other", "x", 9)
			if r := c.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(9), ID: 1}, Weight: 1}); r.Status != wire.StatusSuccess {
				t.Fatalf("same key in another namespace: %+v", r)
			}
		}
	}
	if r := rc.callMaster(wire.TypeRelease, &wire.Release{Key: key, Owner: wire.Owner{Client: cid(7), ID: 1}, Token: r.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
}

func TestServerAuth(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	rc := dialRaw(t, tc.nodes[0].cfg.self().Client)
	// Before Hello every request is refused.
	if r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: "k", Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1}); r.Status != wire.StatusAuthFailed {
		t.Fatalf("acquire before hello: %+v", r)
	}
	if r := rc.hello("ns", "wrong", 1); r.Status != wire.StatusAuthFailed {
		t.Fatalf("wrong secret: %+v", r)
	}
	if r := rc.hello("nope", "s3cret", 1); r.Status != wire.StatusAuthFailed {
		t.Fatalf("unknown namespace: %+v", r)
	}
	if r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: "k", Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1}); r.Status != wire.StatusAuthFailed {
		t.Fatalf("acquire after failed hello: %+v", r)
	}
	if n := tc.nodes[0].svc.Group(group.ID(wire.GroupOf(wire.KeyHash("ns", "k"), 15))).StateMachine().Count(); n != 0 {
		t.Fatalf("refused requests changed state: %d locks", n)
	}
}

func TestServerBadInput(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	addr := tc.nodes[0].cfg.self().Client
	// Oversized frame: the connection is closed.
	c1 := dialRaw(t, addr)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 64<<20)
	if _, err := c1.c.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c1.read(); err == nil {
		t.Fatal("oversized frame: connection stayed open")
	}
	// Broken framing (bad version): closed.
	c2 := dialRaw(t, addr)
	if _, err := c2.c.Write([]byte{0, 0, 0, 10, 99, 1, 0, 0, 0, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c2.read(); err == nil {
		t.Fatal("bad version: connection stayed open")
	}
	// Unknown type and malformed body: BAD_REQUEST, connection stays.
	c3 := dialRaw(t, addr)
	frame := []byte{0, 0, 0, 11, wire.Version, 0x3f, 0, 0, 0, 0, 0, 0, 0, 5, 0x90}
	if _, err := c3.c.Write(frame); err != nil {
		t.Fatal(err)
	}
	f, m, err := c3.read()
	if err != nil || f.ReqID != 5 || m.(*wire.Response).Status != wire.StatusBadRequest {
		t.Fatalf("unknown type: %v %+v %v", f, m, err)
	}
	frame = []byte{0, 0, 0, 12, wire.Version, byte(wire.TypeAcquire), 0, 0, 0, 0, 0, 0, 0, 6, 0xc1, 0xc1}
	if _, err := c3.c.Write(frame); err != nil {
		t.Fatal(err)
	}
	f, m, err = c3.read()
	if err != nil || f.ReqID != 6 || m.(*wire.Response).Status != wire.StatusBadRequest {
		t.Fatalf("malformed body: %v %+v %v", f, m, err)
	}
	// Invalid field (empty key) after hello: BAD_REQUEST.
	c3.hello("ns", "s3cret", 3)
	if r := c3.call(wire.TypeAcquire, &wire.Acquire{Key: "", Owner: wire.Owner{Client: cid(3), ID: 1}, Weight: 1}); r.Status != wire.StatusBadRequest {
		t.Fatalf("empty key: %+v", r)
	}
	// The node still serves others.
	c4 := dialRaw(t, addr)
	c4.hello("ns", "s3cret", 4)
	if r := c4.call(wire.TypeAcquire, &wire.Acquire{Key: "fine", Owner: wire.Owner{Client: cid(4), ID: 1}, Weight: 1}); r.Status != wire.StatusSuccess {
		t.Fatalf("after bad input: %+v", r)
	}
}

func TestServerBlockingAcquirePush(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	key := "hot"
	a := tc.masterConn("ns", key, 1)
	b := tc.masterConn("ns", key, 2)
	r := a.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1, TTLMs: 10000})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	wait := &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Weight: 1, MaxWaitMs: wire.WaitForever, WaitID: 77}
	if w := b.callMaster(wire.TypeAcquire, wait); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", w)
	}
	if rr := a.callMaster(wire.TypeRelease, &wire.Release{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if g := b.awaitGranted(wait); g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("granted: %+v", g)
	}
}

func TestServerViewPush(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	rc := dialRaw(t, tc.nodes[0].cfg.self().Client)
	id := rc.send(wire.TypeSubscribeView, &wire.SubscribeView{})
	f, m, err := rc.read()
	if err != nil || f.ReqID != id {
		t.Fatalf("subscribe: %v %v", f, err)
	}
	v0 := m.(*wire.View)
	if len(v0.Groups) != 15 {
		t.Fatalf("view has %d groups", len(v0.Groups))
	}
	// Move a group node 1 does not master... stop node 3: its groups move
	// and node 1 pushes a newer view.
	tc.stop(2)
	for {
		f, m, err := rc.read()
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := m.(*wire.View); ok && f.Type == wire.TypeViewChanged && v.Version > v0.Version {
			moved := true
			for _, g := range v.Groups {
				if g.Master == 3 {
					moved = false
				}
			}
			if moved {
				return
			}
		}
	}
}
