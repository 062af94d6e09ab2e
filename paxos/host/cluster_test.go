package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/internal/freeport"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
	"github.com/paxlock/paxlock/paxos/pebblestore"
	"github.com/paxlock/paxlock/paxos/tcpnet"
)

// kvSM is a test state machine: "k=v" sets k to v; every command's result
// is the instance that applied it.
type kvSM struct {
	mu      sync.Mutex
	data    map[string]string
	applied uint64
	// failLoads, when set, fails every Load after the first (a snapshot
	// install's), as a state machine that cannot read what was installed.
	failLoads bool
	loads     int
}

// errLoad is the failure a kvSM with failLoads set reports.
var errLoad = errors.New("test: load failed")

func newKV() *kvSM { return &kvSM{data: map[string]string{}} }

func (s *kvSM) Apply(inst uint64, cmds [][]byte, w paxos.Writer, results []any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range cmds {
		k, v, _ := strings.Cut(string(c), "=")
		s.data[k] = v
		w.Set([]byte(k), []byte(v))
		results[i] = inst
	}
	s.applied = inst
}

func (s *kvSM) Load(r paxos.Reader, applied uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	if s.failLoads && s.loads > 1 {
		return errLoad
	}
	s.data = map[string]string{}
	s.applied = applied
	return r.Scan(nil, func(k, v []byte) error {
		s.data[string(k)] = string(v)
		return nil
	})
}

func (s *kvSM) get(k string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[k]
	return v, ok
}

// ckptKV is kvSM as a Checkpointer: Apply writes nothing, Checkpoint
// writes the keys set since the last one.
type ckptKV struct {
	*kvSM
	dirty map[string]bool
}

func (s *ckptKV) Apply(inst uint64, cmds [][]byte, _ paxos.Writer, results []any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range cmds {
		k, v, _ := strings.Cut(string(c), "=")
		s.data[k] = v
		s.dirty[k] = true
		results[i] = inst
	}
	s.applied = inst
}

func (s *ckptKV) Load(r paxos.Reader, applied uint64) error {
	s.mu.Lock()
	s.dirty = map[string]bool{}
	s.mu.Unlock()
	return s.kvSM.Load(r, applied)
}

func (s *ckptKV) Checkpoint(w paxos.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.dirty {
		w.Set([]byte(k), []byte(s.data[k]))
	}
	clear(s.dirty)
}

func (s *ckptKV) CheckpointDue() bool { return false }

// testNode is one replica process: store, transport, host and its groups.
type testNode struct {
	id    paxos.NodeID
	dir   string
	addr  string
	store *pebblestore.Store
	tr    *tcpnet.Transport
	host  *Host
	sms   map[paxos.GroupID]*kvSM
	// fs, when set, is the node's filesystem (a crashable one) instead of
	// dir on disk.
	fs vfs.FS
	// log, when set, is the node's logger instead of quietLogger's.
	log *slog.Logger
	// peers, when set, is the node's configured member set instead of the
	// cluster's; join starts its groups with ReplicaConfig.Join.
	peers []paxos.NodeID
	join  bool
	// obs, when set, is the node's host Observer.
	obs Observer
}

type testCluster struct {
	t      testing.TB
	nodes  map[paxos.NodeID]*testNode
	peers  []paxos.NodeID
	groups int
	keep   uint64
	// inflight is the cores' MaxInflight (0: the default).
	inflight int
	// quorumSync and retransmit are the cores' QuorumSync and
	// RetransmitTicks (0: the default).
	quorumSync bool
	retransmit int
	// ckptEvery, when set, runs Checkpointer state machines that
	// checkpoint every ckptEvery instances.
	ckptEvery uint64
	// wrapTr, when set, wraps each node's transport (to watch what it
	// sends).
	wrapTr func(paxos.NodeID, paxos.Transport) paxos.Transport
	// pki, when set, runs the transports with mutual TLS under its CA.
	pki *paxostest.PKI
	// failLoads names the nodes whose state machines fail every Load
	// after their first (kvSM.failLoads).
	failLoads map[paxos.NodeID]bool
}

// quietLogger discards logs unless PAXLOCK_TEST_LOG is set
// (testutil.Logger).
func quietLogger() *slog.Logger { return testutil.Logger() }

// loopback reserves an address for one test node, kept across its
// restarts: below the ephemeral range and locked against the other test
// binaries, so that tests running at once never take a stopped node's
// port (internal/freeport).
func loopback(t testing.TB) string {
	t.Helper()
	a, err := freeport.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	return a[0]
}

// newTestCluster starts n nodes with groups groups each; opts adjust the
// cluster and its nodes before they start.
func newTestCluster(t testing.TB, n, groups int, keep uint64, opts ...func(*testCluster)) *testCluster {
	tc := &testCluster{t: t, nodes: map[paxos.NodeID]*testNode{}, groups: groups, keep: keep}
	for i := 1; i <= n; i++ {
		tc.peers = append(tc.peers, paxos.NodeID(i))
	}
	for _, id := range tc.peers {
		tc.nodes[id] = &testNode{id: id, dir: t.TempDir(), addr: loopback(t)}
	}
	for _, o := range opts {
		o(tc)
	}
	for _, id := range tc.peers {
		tc.start(id)
	}
	t.Cleanup(func() {
		for id, nd := range tc.nodes {
			if nd.host != nil {
				tc.stop(id)
			}
		}
	})
	return tc
}

func (tc *testCluster) start(id paxos.NodeID) {
	t := tc.t
	nd := tc.nodes[id]
	log := nd.log
	if log == nil {
		log = quietLogger()
	}
	st, err := pebblestore.Open(nd.dir, pebblestore.Options{Logger: log, FS: nd.fs})
	if err != nil {
		t.Fatal(err)
	}
	nd.store = st
	peers := map[paxos.NodeID]string{}
	for pid, p := range tc.nodes {
		if pid != id {
			peers[pid] = p.addr
		}
	}
	tcfg := tcpnet.Config{Self: id, Listen: nd.addr, Peers: peers, Logger: quietLogger()}
	if tc.pki != nil {
		tcfg.TLS = tc.pki.Peer(id)
	}
	tr, err := tcpnet.New(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	nd.tr = tr
	nd.addr = tr.Addr()
	for pid, p := range tc.nodes {
		if pid != id && p.tr != nil {
			p.tr.SetPeer(id, nd.addr)
		}
	}
	var out paxos.Transport = tr
	if tc.wrapTr != nil {
		out = tc.wrapTr(id, tr)
	}
	nd.host = New(Config{Self: id, Store: st, Tick: 10 * time.Millisecond, Transport: out, Logger: log, Observer: nd.obs})
	tr.SetHandler(nd.host.Deliver)
	nd.sms = map[paxos.GroupID]*kvSM{}
	for g := 1; g <= tc.groups; g++ {
		sm := newKV()
		sm.failLoads = tc.failLoads[id]
		var asm paxos.StateMachine = sm
		if tc.ckptEvery > 0 {
			asm = &ckptKV{kvSM: sm, dirty: map[string]bool{}}
		}
		peers := tc.peers
		if nd.peers != nil {
			peers = nd.peers
		}
		gr, err := nd.host.AddReplica(ReplicaConfig{KeepLog: tc.keep, CheckpointEvery: tc.ckptEvery, Join: nd.join, Core: paxos.Config{Group: paxos.GroupID(g), Peers: peers, HeartbeatTicks: 5, LeaseTicks: 50, MaxInflight: tc.inflight,
			QuorumSync: tc.quorumSync, RetransmitTicks: tc.retransmit}}, asm)
		if err != nil {
			t.Fatal(err)
		}
		nd.sms[paxos.GroupID(g)] = sm
		// Placement: group g prefers node g mod N.
		gr.SetPreferred(tc.peers[g%len(tc.peers)])
	}
	nd.host.Start()
}

func (tc *testCluster) stop(id paxos.NodeID) {
	nd := tc.nodes[id]
	nd.host.Stop()
	nd.tr.Close()
	// A store that failed says so again at Close.
	if err := nd.store.Close(); err != nil && !errors.Is(err, paxos.ErrStorageFailed) {
		tc.t.Errorf("close store %d: %v", id, err)
	}
	nd.host = nil
}

// master waits for group g to have a serving master among running nodes.
func (tc *testCluster) master(g paxos.GroupID, timeout time.Duration) *Replica {
	var m *Replica
	testutil.Eventually(tc.t, timeout, func() bool {
		for _, nd := range tc.nodes {
			if nd.host == nil {
				continue
			}
			if gr := nd.host.Replica(g); gr != nil && gr.Status().Serving {
				m = gr
				return true
			}
		}
		return false
	}, "a serving master of group %d", g)
	return m
}

// placed returns group g's master once it is the group's preferred node
// (g mod N) and serves: a master elected elsewhere hands the group over to
// its preferred node after a while, which fails what it had in flight.
func (tc *testCluster) placed(g paxos.GroupID, timeout time.Duration) *Replica {
	want := tc.peers[int(g)%len(tc.peers)]
	var m *Replica
	testutil.Eventually(tc.t, timeout, func() bool {
		nd := tc.nodes[want]
		if nd == nil || nd.host == nil {
			return false
		}
		m = nd.host.Replica(g)
		return m != nil && m.Status().Serving
	}, "group %d served by its preferred node %d", g, want)
	return m
}

// put proposes k=v to group g's master, retrying across master changes.
func (tc *testCluster) put(g paxos.GroupID, k, v string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var inst uint64
	testutil.EventuallyWith(tc.t, 60*time.Second, func() (bool, string) {
		r, err := tc.master(g, 60*time.Second).Propose(ctx, []byte(k+"="+v))
		if err != nil {
			return false, err.Error()
		}
		inst = r.Value.(uint64)
		return true, ""
	}, "put %s=%s in group %d", k, v, g)
	return inst
}

// waitValue waits until node id's replica of group g has k=v.
func (tc *testCluster) waitValue(id paxos.NodeID, g paxos.GroupID, k, v string) {
	if err := testutil.Wait(60*time.Second, func() bool {
		got, ok := tc.nodes[id].sms[g].get(k)
		return ok && got == v
	}); err != nil {
		got, _ := tc.nodes[id].sms[g].get(k)
		tc.t.Fatalf("%v waiting for node %d group %d to have %s=%q: has %q", err, id, g, k, v, got)
	}
}

func TestClusterCommitsAllGroups(t *testing.T) {
	tc := newTestCluster(t, 3, 15, 0)
	for g := paxos.GroupID(1); g <= 15; g++ {
		tc.put(g, "k", fmt.Sprint(g))
	}
	for g := paxos.GroupID(1); g <= 15; g++ {
		for _, id := range tc.peers {
			tc.waitValue(id, g, "k", fmt.Sprint(g))
		}
	}
}

func TestClusterKillAndRestart(t *testing.T) {
	// A short log forces the restarted replica to catch up by snapshot.
	tc := newTestCluster(t, 3, 3, 20)
	for g := paxos.GroupID(1); g <= 3; g++ {
		tc.put(g, "before", "1")
	}
	tc.stop(2)
	for i := range 120 {
		for g := paxos.GroupID(1); g <= 3; g++ {
			tc.put(g, fmt.Sprintf("k%d", i%7), fmt.Sprint(i))
		}
	}
	for g := paxos.GroupID(1); g <= 3; g++ {
		tc.put(g, "after", "2")
	}
	tc.start(2)
	for g := paxos.GroupID(1); g <= 3; g++ {
		tc.waitValue(2, g, "before", "1")
		tc.waitValue(2, g, "after", "2")
		tc.waitValue(2, g, "k0", "119")
	}
	// The restarted node serves again: its preferred group moves back.
	tc.put(2, "back", "3")
	tc.waitValue(2, 2, "back", "3")
}

func TestClusterFullRestartKeepsChosen(t *testing.T) {
	tc := newTestCluster(t, 3, 2, 0)
	for i := range 20 {
		tc.put(1, fmt.Sprintf("k%d", i), "v")
		tc.put(2, fmt.Sprintf("k%d", i), "w")
	}
	for _, id := range tc.peers {
		tc.stop(id)
	}
	for _, id := range tc.peers {
		tc.start(id)
	}
	for _, id := range tc.peers {
		tc.waitValue(id, 1, "k19", "v")
		tc.waitValue(id, 2, "k19", "w")
	}
	tc.put(1, "new", "x")
	for _, id := range tc.peers {
		tc.waitValue(id, 1, "new", "x")
	}
}

// TestClusterCheckpointsReplayAfterCrash: with state machines that write
// only at checkpoints, a replica that crashes (keeping only what was
// synced) comes back from its last checkpoint plus the log above it, and a
// replica that was down past the truncation point catches up by a snapshot
// taken at a checkpoint.
func TestClusterCheckpointsReplayAfterCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	tc := newTestCluster(t, 3, 2, 20, func(tc *testCluster) {
		tc.ckptEvery = 7
		tc.nodes[1].fs, tc.nodes[1].dir = mem, "n1"
	})
	for g := paxos.GroupID(1); g <= 2; g++ {
		tc.put(g, "first", "1")
	}
	tc.stop(2)
	for i := range 60 {
		for g := paxos.GroupID(1); g <= 2; g++ {
			tc.put(g, fmt.Sprintf("k%d", i%9), fmt.Sprint(i))
		}
	}
	for g := paxos.GroupID(1); g <= 2; g++ {
		tc.waitValue(1, g, "k5", "59")
	}
	// Node 1 crashes: only its synced writes survive; its clean stop
	// (which would checkpoint) writes to a filesystem nobody reads again.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	st, err := pebblestore.Open("n1", pebblestore.Options{Logger: quietLogger(), FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	for g := paxos.GroupID(1); g <= 2; g++ {
		gs, err := st.LoadGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		// 60 commands per group: several checkpoints are on disk (each
		// made durable by the synced rounds after it), and the last one
		// is all the keyspace reflects.
		if gs.Applied == 0 || gs.Applied%7 != 0 {
			t.Fatalf("group %d: the keyspace reflects instance %d, not a checkpoint (every 7)", g, gs.Applied)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	tc.stop(1)
	tc.nodes[1].fs = crashed
	tc.start(1)
	for i := 60; i < 120; i++ {
		for g := paxos.GroupID(1); g <= 2; g++ {
			tc.put(g, fmt.Sprintf("k%d", i%9), fmt.Sprint(i))
		}
	}
	tc.start(2) // behind the truncated log: catches up by snapshot
	for _, id := range tc.peers {
		for g := paxos.GroupID(1); g <= 2; g++ {
			tc.waitValue(id, g, "first", "1")
			tc.waitValue(id, g, "k0", "117")
			tc.waitValue(id, g, "k8", "116")
		}
	}
}
