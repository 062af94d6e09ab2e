package group

import (
	"sync"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// fakeGroup replicates one lock group among a few in-memory replicas for
// unit tests, with no Host, no store and no network: the test decides
// which replica masters the group, and when a proposal is chosen or fails
// (or, with auto, every proposal is chosen as it is submitted). A chosen
// command is applied to every replica's state machine, in order, and its
// result handed to its proposer, all on the goroutine that chose it, so a
// test that drives the workers from its own goroutine runs them there too.
type fakeGroup struct {
	mu       sync.Mutex
	replicas []*fakeReplica
	inst     uint64          // the last chosen instance
	held     []*fakeProposal // submitted, not yet chosen or failed
	// auto chooses each proposal as it is submitted.
	auto bool
	// reject, when set, fails every proposal at once with it.
	reject error
	// submitted counts the proposals submitted, failed at once or not.
	submitted int
	// onSubmit, when set, is told of every proposal as it is submitted:
	// the proposing node, the command, and the error it fails with at
	// once (nil: held, or chosen with auto).
	onSubmit func(node paxos.NodeID, cmd []byte, err error)
}

// fakeReplica is one node's Consensus of a fakeGroup.
type fakeReplica struct {
	g    *fakeGroup
	node paxos.NodeID
	sm   *StateMachine
	kv   *memKV
	soft paxos.SoftState // under g.mu
}

// fakeProposal is a submitted command; res is set once it is applied.
type fakeProposal struct {
	from *fakeReplica
	cmd  []byte
	cb   paxos.Callback
	res  paxos.Result
}

var _ Consensus = (*fakeReplica)(nil)

// newFakeGroup returns a group replicated on nodes 1..n, with no master.
func newFakeGroup(n int) *fakeGroup {
	g := &fakeGroup{}
	for i := 1; i <= n; i++ {
		g.replicas = append(g.replicas, &fakeReplica{g: g, node: paxos.NodeID(i), kv: newMemKV()})
	}
	return g
}

// replica returns node's replica.
func (g *fakeGroup) replica(node paxos.NodeID) *fakeReplica { return g.replicas[node-1] }

// Submit implements Consensus: like *host.Replica, it fails the proposal
// at once when the replica does not serve.
func (r *fakeReplica) Submit(cmd []byte, cb paxos.Callback) {
	g := r.g
	g.mu.Lock()
	g.submitted++
	err := g.reject
	if err == nil && !r.soft.Serving {
		err = paxos.ErrNotMaster
	}
	onSubmit := g.onSubmit
	if err != nil {
		g.mu.Unlock()
		if onSubmit != nil {
			onSubmit(r.node, cmd, err)
		}
		cb(paxos.Result{Err: err})
		return
	}
	p := &fakeProposal{from: r, cmd: cmd, cb: cb}
	g.held = append(g.held, p)
	auto := g.auto
	g.mu.Unlock()
	if onSubmit != nil {
		onSubmit(r.node, cmd, nil)
	}
	if auto {
		g.chooseAll()
	}
}

// Status implements Consensus.
func (r *fakeReplica) Status() paxos.SoftState {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.soft
}

// Progress implements Consensus: every replica applies what is chosen at
// once.
func (r *fakeReplica) Progress() (committed, applied, logStart uint64) {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.g.inst, r.g.inst, 1
}

// SetPreferred implements Consensus. The fake has no placement: the
// test moves mastership (setMaster).
func (r *fakeReplica) SetPreferred(paxos.NodeID) {}

// setMaster makes node the group's serving master (0: nobody), telling
// every replica whose view changes, the old master first, as the paxos
// runtime does (a master stops serving before another can start).
func (g *fakeGroup) setMaster(node paxos.NodeID) {
	g.mu.Lock()
	var changed []*fakeReplica
	for _, r := range g.replicas {
		next := paxos.SoftState{Master: node, Serving: node != 0 && r.node == node}
		if next.Master != 0 {
			next.Ballot = r.soft.Ballot
			if r.soft.Master != node {
				next.Ballot.Round++
				next.Ballot.Node = node
			}
		}
		if next != r.soft {
			r.soft = next
			changed = append(changed, r)
		}
	}
	g.mu.Unlock()
	// Those that stop serving first.
	for _, r := range changed {
		if !r.soft.Serving {
			r.sm.MasterChanged(r.Status())
		}
	}
	for _, r := range changed {
		if s := r.Status(); s.Serving {
			r.sm.MasterChanged(s)
		}
	}
}

// elect makes node the group's master-elect: every replica names it
// master and none serves (it won the election and is still applying what
// was chosen before its ballot); setMaster(node) then lets it serve.
func (g *fakeGroup) elect(node paxos.NodeID) {
	g.mu.Lock()
	for _, r := range g.replicas {
		// A new election: a new ballot, even for the node that was master.
		r.soft = paxos.SoftState{Master: node, Ballot: paxos.Ballot{Round: r.soft.Ballot.Round + 1, Node: node}}
	}
	g.mu.Unlock()
	for _, r := range g.replicas {
		r.sm.MasterChanged(r.Status())
	}
}

// applyNext chooses the oldest held proposal: it applies it on every
// replica and returns it with its result, which has not reached its
// proposer yet (answer does that). It returns nil when none is held.
func (g *fakeGroup) applyNext() *fakeProposal {
	g.mu.Lock()
	if len(g.held) == 0 {
		g.mu.Unlock()
		return nil
	}
	p := g.held[0]
	g.held = g.held[1:]
	g.inst++
	inst := g.inst
	g.mu.Unlock()
	for _, r := range g.replicas {
		res := make([]any, 1)
		r.sm.Apply(inst, [][]byte{p.cmd}, r.kv, res)
		if r == p.from {
			p.res = paxos.Result{Instance: inst, Value: res[0]}
		}
	}
	return p
}

// answer hands p's result to its proposer.
func (p *fakeProposal) answer() { p.cb(p.res) }

// chooseNext chooses the oldest held proposal and answers it; it reports
// whether there was one.
func (g *fakeGroup) chooseNext() bool {
	p := g.applyNext()
	if p != nil {
		p.answer()
	}
	return p != nil
}

// chooseAll chooses every held proposal, and those they lead to, in
// order.
func (g *fakeGroup) chooseAll() {
	for g.chooseNext() {
	}
}

// failNext fails the oldest held proposal with err, choosing nothing.
func (g *fakeGroup) failNext(err error) bool {
	g.mu.Lock()
	if len(g.held) == 0 {
		g.mu.Unlock()
		return false
	}
	p := g.held[0]
	g.held = g.held[1:]
	g.mu.Unlock()
	p.cb(paxos.Result{Err: err})
	return true
}

// pending returns how many proposals are held.
func (g *fakeGroup) pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

// fakeCluster runs the lock service of a few nodes over fake consensus,
// one fakeGroup per lock group, every proposal chosen as it is submitted:
// no Host, no store, no network, and no goroutine of its own. A request
// is answered, and a deadline's consequences pushed, before do or the fake
// clock's Advance returns. Lock group g starts mastered by peers[g%n], as
// in cluster.
type fakeCluster struct {
	t      testing.TB
	peers  []paxos.NodeID
	groups int
	fgs    []*fakeGroup
	svcs   map[paxos.NodeID]*Service
	down   map[paxos.NodeID]bool
	reqID  uint64
}

func newFakeCluster(t testing.TB, n int, cfg Config) *fakeCluster {
	if cfg.Groups == 0 {
		cfg.Groups = 15
	}
	c := &fakeCluster{t: t, groups: cfg.Groups, svcs: map[paxos.NodeID]*Service{}, down: map[paxos.NodeID]bool{}}
	for i := 1; i <= n; i++ {
		c.peers = append(c.peers, paxos.NodeID(i))
	}
	for range cfg.Groups {
		fg := newFakeGroup(n)
		fg.auto = true
		c.fgs = append(c.fgs, fg)
	}
	for _, id := range c.peers {
		nc := cfg
		nc.Logger = testutil.Logger()
		nc.Self = id
		svc, err := NewServiceWith(nc, func(g ID, sm *StateMachine) (Consensus, error) {
			r := c.fgs[g].replica(id)
			r.sm = sm
			return r, nil
		}, func(g ID) paxos.NodeID { return c.peers[int(g)%n] })
		if err != nil {
			t.Fatal(err)
		}
		c.svcs[id] = svc
		t.Cleanup(svc.Close)
	}
	for g, fg := range c.fgs {
		fg.setMaster(c.peers[int(g)%n])
	}
	return c
}

// svc returns node id's service, nil once it is stopped.
func (c *fakeCluster) svc(id paxos.NodeID) *Service {
	if c.down[id] {
		return nil
	}
	return c.svcs[id]
}

// groupMaster returns the node serving lock group g and its service.
func (c *fakeCluster) groupMaster(g ID) (paxos.NodeID, *Service) {
	c.t.Helper()
	for _, id := range c.peers {
		if svc := c.svc(id); svc != nil && svc.Group(g).Serving() {
			return id, svc
		}
	}
	c.t.Fatalf("no master for group %d", g)
	return 0, nil
}

// master returns the service serving key's group.
func (c *fakeCluster) master(ns, key string) *Service {
	_, svc := c.groupMaster(Of(wire.KeyHash(ns, key), c.groups))
	return svc
}

// do submits r to the master of its key (namespace "ns" if none) and
// returns the answer, which is there when Submit returns unless another
// goroutine is running the worker (do then waits for it).
func (c *fakeCluster) do(s *testSink, r Request) wire.Response {
	c.t.Helper()
	if r.Namespace == "" {
		r.Namespace = "ns"
	}
	r.Hash = wire.KeyHash(r.Namespace, r.Key)
	c.reqID++
	r.ReqID = c.reqID
	r.Sink = s
	c.master(r.Namespace, r.Key).Submit(&r)
	s.mu.Lock()
	resp, ok := s.resps[r.ReqID]
	s.mu.Unlock()
	if !ok {
		// Another goroutine is running the worker (a ForceRelease
		// waiting in the background submitted to it): the answer comes
		// when that run gets to the request.
		return s.response(c.t, r.ReqID)
	}
	return resp
}

// state asks the key's master for the key's state.
func (c *fakeCluster) state(key string) wire.Response {
	c.t.Helper()
	return c.do(newSink(), Request{Op: OpState, Key: key})
}

// takeOver moves lock group g's mastership from its master to another
// node and returns the new master. With stop, the old master's node stops
// first (its service closes), as when it dies and the others elect a
// master once its lease has run out.
func (c *fakeCluster) takeOver(g int, stop bool) paxos.NodeID {
	c.t.Helper()
	old, svc := c.groupMaster(ID(g))
	var target paxos.NodeID
	for _, id := range c.peers {
		if id != old && !c.down[id] {
			target = id
			break
		}
	}
	if stop {
		svc.Close()
		c.down[old] = true
	}
	c.fgs[g].setMaster(target)
	return target
}
