package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// TestMasterElectHoldsRequests: a request that reaches a group's
// master-elect (elected, not serving yet) is decided the moment it serves
// rather than answered NO_MASTER; it is refused when another node wins
// instead, or when the master-elect does not serve within earlyLimit; a
// node that is not the master-elect, or a master that served and lost its
// lease, refuses at once, as before.
func TestMasterElectHoldsRequests(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: clk})
	const key = "elect/k"
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	fg := c.fgs[g]
	old, _ := c.groupMaster(g)
	next := old%3 + 1
	other := next%3 + 1
	s := newSink()
	var reqID uint64
	submit := func(node paxos.NodeID, o wire.Owner) uint64 {
		reqID++
		c.svc(node).Submit(&Request{Op: OpAcquire, Namespace: "ns", Key: key, Hash: wire.KeyHash("ns", key),
			ReqID: reqID, Sink: s, Owner: o, TTL: 10 * time.Second})
		return reqID
	}
	answered := func(id uint64) (wire.Response, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		r, ok := s.resps[id]
		return r, ok
	}

	// Held until the master-elect serves, then granted.
	fg.elect(next)
	id := submit(next, owner(1, 1))
	if r, ok := answered(id); ok {
		t.Fatalf("the master-elect answered before it serves: %+v", r)
	}
	if r, ok := answered(submit(other, owner(1, 9))); !ok || r.Status != wire.StatusNoMaster {
		t.Fatalf("a node that is not the master-elect: %+v, %v (want NO_MASTER at once)", r, ok)
	}
	fg.setMaster(next)
	if r := s.response(t, id); r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("held request once the master-elect serves: %+v (want SUCCESS with a token)", r)
	}

	// Another node wins: the held request is refused.
	fg.elect(other)
	id = submit(other, owner(1, 2))
	fg.elect(next)
	if r, ok := answered(id); !ok || r.Status != wire.StatusNoMaster {
		t.Fatalf("held request after another node won: %+v, %v (want NO_MASTER)", r, ok)
	}

	// A master that served and lost its lease (it still names itself
	// master, under the ballot it served) refuses at once.
	fg.setMaster(next)
	r := fg.replica(next)
	fg.mu.Lock()
	r.soft.Serving = false
	fg.mu.Unlock()
	r.sm.MasterChanged(r.Status())
	if r, ok := answered(submit(next, owner(1, 4))); !ok || r.Status != wire.StatusNoMaster {
		t.Fatalf("a master that lost its lease: %+v, %v (want NO_MASTER at once)", r, ok)
	}

	// The master-elect does not serve within earlyLimit: refused.
	fg.elect(next)
	id = submit(next, owner(1, 3))
	clk.Advance(earlyLimit - time.Millisecond)
	if r, ok := answered(id); ok {
		t.Fatalf("answered before earlyLimit: %+v", r)
	}
	clk.Advance(time.Millisecond)
	if r, ok := answered(id); !ok || r.Status != wire.StatusNoMaster {
		t.Fatalf("held request after earlyLimit: %+v, %v (want NO_MASTER)", r, ok)
	}
}
