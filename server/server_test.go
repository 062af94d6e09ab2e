package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
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

// rawConn speaks the protocol by hand, for tests of the server's edges.
type rawConn struct {
	t   testing.TB
	c   net.Conn
	buf []byte
	id  uint64
}

func dialRaw(t testing.TB, addr string) *rawConn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

func (r *rawConn) send(typ wire.Type, m wire.Message) uint64 {
	r.id++
	b, err := wire.AppendFrame(nil, typ, r.id, m)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
	return r.id
}

// read returns the next frame (reply or push).
func (r *rawConn) read() (wire.Frame, wire.Message, error) {
	if err := r.c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return wire.Frame{}, nil, err
	}
	f, buf, err := wire.ReadFrame(r.c, r.buf, wire.DefaultMaxFrame)
	r.buf = buf
	if err != nil {
		return f, nil, err
	}
	m, err := wire.Decode(f.Type, f.Body)
	return f, m, err
}

// call sends a request and returns its Response, skipping pushes.
//
// A NO_MASTER answer (a group between masters: on a loaded machine a
// lease may lapse right after a cluster's start) is retried after its
// RetryAfterMs, as a client does, for up to 30 s; the last answer is
// returned.
func (r *rawConn) call(typ wire.Type, m wire.Message) *wire.Response {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := r.callOnce(typ, m)
		if resp.Status != wire.StatusNoMaster || time.Now().After(deadline) {
			return resp
		}
		time.Sleep(time.Duration(max(resp.RetryAfterMs, 10)) * time.Millisecond)
	}
}

// callOnce sends m and returns its answer, skipping pushes and other
// replies.
func (r *rawConn) callOnce(typ wire.Type, m wire.Message) *wire.Response {
	id := r.send(typ, m)
	for {
		f, msg, err := r.read()
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		if f.ReqID == id {
			resp, ok := msg.(*wire.Response)
			if !ok {
				r.t.Fatalf("reply to %v is %T", typ, msg)
			}
			return resp
		}
	}
}

// callAny sends a request and returns its reply, whatever its type,
// skipping pushes.
func (r *rawConn) callAny(typ wire.Type, m wire.Message) wire.Message {
	id := r.send(typ, m)
	for {
		f, msg, err := r.read()
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		if f.ReqID == id {
			return msg
		}
	}
}

// hello authenticates (SCRAM) as test client n: with key testKey(n), so
// with client id cid(n).
func (r *rawConn) hello(ns, secret string, n uint64) *wire.Response {
	resp, err := testutil.ScramHello(r.callAny, ns, secret, testKey(n))
	if err != nil {
		r.t.Fatalf("handshake: %v", err)
	}
	return resp
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
	r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(7), ID: 1}, Weight: 1, TTLMs: 10000})
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("acquire: %+v", r)
	}
	// Another node redirects to the master.
	g := wire.GroupOf(wire.KeyHash("ns", key), 15)
	for _, s := range tc.nodes {
		if s.svc.Group(group.ID(g)).Serving() {
			continue
		}
		oc := dialRaw(t, s.cfg.self().Client)
		oc.hello("ns", "s3cret", 8)
		r := oc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(8), ID: 1}, Weight: 1})
		if r.Status != wire.StatusMasterRedirect || r.Redirect == "" {
			t.Fatalf("non-master answered %+v", r)
		}
		break
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
			if r := c.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(9), ID: 1}, Weight: 1}); r.Status != wire.StatusSuccess {
				t.Fatalf("same key in another namespace: %+v", r)
			}
		}
	}
	if r := rc.call(wire.TypeRelease, &wire.Release{Key: key, Owner: wire.Owner{Client: cid(7), ID: 1}, Token: r.Token}); r.Status != wire.StatusSuccess {
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
	r := a.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1, TTLMs: 10000})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	if w := b.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Weight: 1, MaxWaitMs: wire.WaitForever, WaitID: 77}); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", w)
	}
	if rr := a.call(wire.TypeRelease, &wire.Release{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	for {
		f, m, err := b.read()
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := m.(*wire.Granted); ok && f.ReqID == 0 {
			if g.WaitID != 77 || g.Status != wire.StatusSuccess || g.Token <= r.Token {
				t.Fatalf("granted: %+v", g)
			}
			return
		}
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
