package group

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/clock"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/paxos/paxostest"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// testSink records what the service says to one connection.
type testSink struct {
	mu     sync.Mutex
	resps  map[uint64]wire.Response
	pushes []wire.Message
	signal chan struct{}
}

func newSink() *testSink {
	return &testSink{resps: map[uint64]wire.Response{}, signal: make(chan struct{}, 1)}
}

func (s *testSink) Respond(id uint64, r wire.Response) {
	s.mu.Lock()
	s.resps[id] = r
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *testSink) Push(m wire.Message) {
	s.mu.Lock()
	s.pushes = append(s.pushes, m)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// wait waits (up to a generous bound) until cond holds on the sink.
func (s *testSink) wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-s.signal:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *testSink) response(t testing.TB, id uint64) wire.Response {
	t.Helper()
	var r wire.Response
	s.wait(t, "response", func() bool {
		var ok bool
		r, ok = s.resps[id]
		return ok
	})
	return r
}

func (s *testSink) granted(t testing.TB, waitID uint64) *wire.Granted {
	t.Helper()
	var g *wire.Granted
	s.wait(t, "granted", func() bool {
		for _, m := range s.pushes {
			if x, ok := m.(*wire.Granted); ok && x.WaitID == waitID {
				g = x
				return true
			}
		}
		return false
	})
	return g
}

type node struct {
	id    paxos.NodeID
	dir   string
	store *pebblestore.Store
	host  *host.Host
	svc   *Service
}

// The cluster's clock: a master's lease is clusterLeaseTicks ticks of
// clusterTick (300 ms).
const (
	clusterTick       = 5 * time.Millisecond
	clusterLeaseTicks = 60
)

// cluster runs the lock service of n nodes on real paxos Hosts with
// on-disk stores, joined by a MemNetwork: for the integration tests of the
// service with its consensus (mastership transfers, restarts, catch-up, traffic with
// master changes). Tests of the workers' own behaviour use fakeCluster.
type cluster struct {
	t      testing.TB
	net    *paxostest.MemNetwork
	nodes  map[paxos.NodeID]*node // the map is fixed; node fields change under nmu
	peers  []paxos.NodeID
	cfg    Config
	reqID  uint64
	mu     sync.Mutex
	nmu    sync.Mutex // guards node.host and node.svc (stop and start race with clients)
	groups int
}

func newCluster(t testing.TB, n int, cfg Config) *cluster {
	if cfg.Groups == 0 {
		cfg.Groups = 15
	}
	c := &cluster{t: t, net: paxostest.NewMemNetwork(), nodes: map[paxos.NodeID]*node{}, cfg: cfg, groups: cfg.Groups}
	for i := 1; i <= n; i++ {
		c.peers = append(c.peers, paxos.NodeID(i))
	}
	for _, id := range c.peers {
		c.nodes[id] = &node{id: id, dir: t.TempDir()}
		c.start(id)
	}
	t.Cleanup(func() {
		for _, id := range c.peers {
			if c.running(id) {
				c.stop(id)
			}
		}
	})
	c.settle()
	return c
}

// settle waits until every group is served by its preferred node, so that
// no placement transfer moves a master in the middle of a test.
func (c *cluster) settle() {
	for g := 0; g < c.groups; g++ {
		want := c.peers[int(g)%len(c.peers)]
		testutil.Eventually(c.t, 60*time.Second, func() bool {
			id, _ := c.findMaster(ID(g))
			return id == want
		}, "group %d to be served by its preferred node %d", g, want)
	}
}

// running reports whether node id is up.
func (c *cluster) running(id paxos.NodeID) bool {
	c.nmu.Lock()
	defer c.nmu.Unlock()
	return c.nodes[id].host != nil
}

// svc returns node id's service, nil while it is stopped.
func (c *cluster) svc(id paxos.NodeID) *Service {
	c.nmu.Lock()
	defer c.nmu.Unlock()
	if c.nodes[id].host == nil {
		return nil
	}
	return c.nodes[id].svc
}

// replica returns node id's replica of lock group g's Paxos group, nil
// while the node is down.
func (c *cluster) replica(id paxos.NodeID, g ID) *host.Replica {
	c.nmu.Lock()
	defer c.nmu.Unlock()
	if c.nodes[id].host == nil {
		return nil
	}
	return c.nodes[id].host.Replica(ID(g).ReplicaGroup())
}

func (c *cluster) start(id paxos.NodeID) {
	nd := c.nodes[id]
	st, err := pebblestore.Open(nd.dir, pebblestore.Options{Logger: testutil.Logger()})
	if err != nil {
		c.t.Fatal(err)
	}
	nd.store = st
	ep := c.net.Join(id, nil)
	h := host.New(host.Config{Self: id, Store: st, Tick: clusterTick, Transport: ep, Logger: testutil.Logger()})
	ep.SetHandler(h.Deliver)
	c.nmu.Lock()
	nd.host = h
	c.nmu.Unlock()
	cfg := c.cfg
	cfg.Logger = testutil.Logger()
	cfg.Self = id
	svc, err := NewService(cfg, h, c.peers, paxos.Config{HeartbeatTicks: 5, LeaseTicks: clusterLeaseTicks},
		func(g ID) paxos.NodeID { return c.peers[int(g)%len(c.peers)] })
	if err != nil {
		c.t.Fatal(err)
	}
	c.nmu.Lock()
	nd.svc = svc
	c.nmu.Unlock()
	nd.host.Start()
}

func (c *cluster) stop(id paxos.NodeID) {
	nd := c.nodes[id]
	c.nmu.Lock()
	h := nd.host
	nd.host = nil
	c.nmu.Unlock()
	h.Stop()
	nd.svc.Close()
	if err := nd.store.Close(); err != nil {
		c.t.Errorf("close store: %v", err)
	}
}

// master returns the service serving key's group, waiting for one.
func (c *cluster) master(ns, key string) *Service {
	_, svc := c.groupMaster(Of(wire.KeyHash(ns, key), c.groups))
	return svc
}

// groupMaster returns the node serving lock group g and its service,
// waiting for one.
func (c *cluster) groupMaster(g ID) (paxos.NodeID, *Service) {
	var id paxos.NodeID
	var svc *Service
	testutil.Eventually(c.t, 30*time.Second, func() bool {
		id, svc = c.findMaster(ID(g))
		return svc != nil
	}, "a master for group %d", g)
	return id, svc
}

// findMaster returns the node serving lock group g now, if any.
func (c *cluster) findMaster(g ID) (paxos.NodeID, *Service) {
	for _, id := range c.peers {
		if svc := c.svc(id); svc != nil && svc.Group(g).Serving() {
			return id, svc
		}
	}
	return 0, nil
}

func (c *cluster) nextID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqID++
	return c.reqID
}

// do submits r to the master of its key and returns the response. It
// retries on NO_MASTER (a master change) up to a bound.
func (c *cluster) do(s *testSink, r Request) wire.Response {
	c.t.Helper()
	r.Hash = wire.KeyHash(r.Namespace, r.Key)
	if r.Namespace == "" {
		r.Namespace = "ns"
		r.Hash = wire.KeyHash(r.Namespace, r.Key)
	}
	var resp wire.Response
	testutil.Eventually(c.t, 30*time.Second, func() bool {
		r.ReqID = c.nextID()
		r.Sink = s
		rr := r
		c.master(r.Namespace, r.Key).Submit(&rr)
		resp = s.response(c.t, r.ReqID)
		return resp.Status != wire.StatusNoMaster
	}, "a master to answer %+v", r)
	return resp
}

func owner(c, id uint64) wire.Owner { return wire.Owner{Client: c, ID: id} }

// TestAcquireReleaseGrant: acquire, try-lock, reacquire, a blocking
// acquire granted by the release, refused releases and a state query, on
// three real replicas. An integration test on purpose: the same story
// end to end through paxos Hosts and stores.
func TestAcquireReleaseGrant(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{})
	a, b := newSink(), newSink()
	r := c.do(a, Request{Op: OpAcquire, Key: "k", Owner: owner(1, 1), TTL: 10 * time.Second})
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("acquire: %+v", r)
	}
	tok := r.Token
	// A try-lock by another owner is refused at once.
	if r2 := c.do(b, Request{Op: OpAcquire, Key: "k", Owner: owner(2, 1)}); r2.Status != wire.StatusLockOccupied || r2.Holder != owner(1, 1) || r2.Token != tok {
		t.Fatalf("try-lock: %+v", r2)
	}
	// A reacquire by the holder keeps the token.
	if r3 := c.do(a, Request{Op: OpAcquire, Key: "k", Owner: owner(1, 1)}); r3.Status != wire.StatusSuccess || r3.Token != tok {
		t.Fatalf("reacquire: %+v (token %d)", r3, tok)
	}
	// A blocking acquire waits, and the release hands the lock over.
	if r4 := c.do(b, Request{Op: OpAcquire, Key: "k", Owner: owner(2, 1), MaxWait: -1, WaitID: 9}); r4.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", r4)
	}
	// Wrong token and wrong owner change nothing.
	if r5 := c.do(b, Request{Op: OpRelease, Key: "k", Owner: owner(2, 1), Token: tok}); r5.Status != wire.StatusLockChangedOwner {
		t.Fatalf("release by non-owner: %+v", r5)
	}
	if r6 := c.do(a, Request{Op: OpRelease, Key: "k", Owner: owner(1, 1), Token: tok + 1}); r6.Status != wire.StatusTokenError {
		t.Fatalf("release with wrong token: %+v", r6)
	}
	if r7 := c.do(a, Request{Op: OpRelease, Key: "k", Owner: owner(1, 1), Token: tok}); r7.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r7)
	}
	g := b.granted(t, 9)
	if g.Status != wire.StatusSuccess || g.Token <= tok {
		t.Fatalf("granted: %+v, old token %d", g, tok)
	}
	st := c.do(a, Request{Op: OpState, Key: "k"})
	if st.Status != wire.StatusSuccess || st.Holder != owner(2, 1) || st.Token != g.Token {
		t.Fatalf("state: %+v", st)
	}
}

// push waits for a push that match accepts and returns it.
func (s *testSink) push(t testing.TB, what string, match func(wire.Message) bool) wire.Message {
	t.Helper()
	var got wire.Message
	s.wait(t, what, func() bool {
		for _, m := range s.pushes {
			if match(m) {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

// count returns how many pushes match accepts.
func (s *testSink) count(match func(wire.Message) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.pushes {
		if match(m) {
			n++
		}
	}
	return n
}

// watchEvents returns the WatchEvents of watch id, in order.
func (s *testSink) watchEvents(id uint64) []wire.WatchEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.WatchEvent
	for _, m := range s.pushes {
		if e, ok := m.(*wire.WatchEvent); ok && e.WatchID == id {
			out = append(out, *e)
		}
	}
	return out
}

// waitWatch waits until watch id has had n events and returns them.
func (s *testSink) waitWatch(t testing.TB, id uint64, n int) []wire.WatchEvent {
	t.Helper()
	s.wait(t, fmt.Sprintf("%d events of watch %d", n, id), func() bool {
		k := 0
		for _, m := range s.pushes {
			if e, ok := m.(*wire.WatchEvent); ok && e.WatchID == id {
				k++
			}
		}
		return k >= n
	})
	return s.watchEvents(id)
}

func isGranted(waitID uint64) func(wire.Message) bool {
	return func(m wire.Message) bool {
		g, ok := m.(*wire.Granted)
		return ok && g.WaitID == waitID
	}
}

func isLost(token uint64) func(wire.Message) bool {
	return func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Token == token
	}
}

// state asks the key's master for the key's state. Being handled by the
// key's worker after everything submitted before it, it is also a
// barrier: pushes the worker made before are in their sinks.
func (c *cluster) state(key string) wire.Response {
	c.t.Helper()
	return c.do(newSink(), Request{Op: OpState, Key: key})
}

// advanceUntil moves the fake clock forward in steps until cond holds,
// for at most 100000 steps. It is for a fakeCluster or a workerRig, where
// a step's consequences are done when Advance returns.
func advanceUntil(t testing.TB, fc *clock.Fake, step time.Duration, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 100000 {
			t.Fatalf("%s did not happen within %v", what, 100000*step)
		}
		fc.Advance(step)
	}
}

// lockCluster is what the tests of the service's behaviour ask of a
// cluster: the real one (cluster) or the fake (fakeCluster).
type lockCluster interface {
	// do submits r to the master of its key and returns the answer.
	do(s *testSink, r Request) wire.Response
	// state asks the key's master for the key's state.
	state(key string) wire.Response
	// master returns the service serving key's group.
	master(ns, key string) *Service
}

var (
	_ lockCluster = (*cluster)(nil)
	_ lockCluster = (*fakeCluster)(nil)
)

// waiterSpec is a blocking acquire: who waits, how, and the connection
// it waits on.
type waiterSpec struct {
	owner  wire.Owner
	weight uint8
	kind   wire.Kind
	sink   *testSink
	waitID uint64
}

// enqueue makes w wait for key; it must be answered LOCK_WAIT.
func enqueue(t *testing.T, c lockCluster, key string, w *waiterSpec) {
	t.Helper()
	w.sink = newSink()
	r := c.do(w.sink, Request{Op: OpAcquire, Key: key, Owner: w.owner, Kind: w.kind, Weight: w.weight, MaxWait: -1, WaitID: w.waitID, TTL: 20 * time.Second})
	if r.Status != wire.StatusLockWait {
		t.Fatalf("waiter %v: %+v, want LOCK_WAIT", w.owner, r)
	}
}

// freed reports whether key is free, as its master's state says.
func freed(c lockCluster, key string) func() bool {
	return func() bool { return c.state(key).Status == wire.StatusLockDeleted }
}
