package paxos

import (
	"testing"
)

// net is a hand-driven network for scenario tests: messages wait in a
// queue until the test delivers or drops them.
type testNet struct {
	t     *testing.T
	cores map[NodeID]*Core
	disks map[NodeID]*simDisk
	queue []Message
	apps  map[NodeID][]Applied
}

func newTestNet(t *testing.T, n int) *testNet {
	tn := &testNet{t: t, cores: map[NodeID]*Core{}, disks: map[NodeID]*simDisk{}, apps: map[NodeID][]Applied{}}
	var peers []NodeID
	for i := 1; i <= n; i++ {
		peers = append(peers, NodeID(i))
	}
	for _, id := range peers {
		d := &simDisk{log: map[uint64]Entry{}, logStart: 1}
		c, err := NewCore(Config{ID: id, Group: 1, Peers: peers, HeartbeatTicks: 2, LeaseTicks: 10, MaxInflight: 4}, InitState{}, d)
		if err != nil {
			t.Fatal(err)
		}
		tn.cores[id], tn.disks[id] = c, d
	}
	return tn
}

// flush carries out every node's Ready, queueing the messages.
func (tn *testNet) flush() {
	for again := true; again; {
		again = false
		for id, c := range tn.cores {
			if c == nil || !c.HasReady() {
				continue
			}
			again = true
			rd := c.Ready()
			for _, e := range rd.Entries {
				tn.disks[id].log[e.Instance] = e
			}
			tn.disks[id].hard = rd.HardState
			tn.queue = append(tn.queue, rd.Messages...)
			// Persisted above at once: the votes may leave now, those
			// to the replica itself through the queue like any other.
			tn.queue = append(tn.queue, rd.MessagesAfterSync...)
			tn.apps[id] = append(tn.apps[id], rd.Apply...)
			c.Advance(rd)
		}
	}
}

// deliver hands over queued messages that keep returns true for and drops
// the others.
func (tn *testNet) deliver(keep func(Message) bool) {
	q := tn.queue
	tn.queue = nil
	for _, m := range q {
		if c := tn.cores[m.To]; c != nil && keep(m) {
			c.Step(m)
		}
	}
	tn.flush()
}

func all(Message) bool { return true }

func (tn *testNet) settle(rounds int) {
	for range rounds {
		tn.deliver(all)
	}
}

func (tn *testNet) tick(n int) {
	for range n {
		for _, c := range tn.cores {
			if c != nil {
				c.Tick()
			}
		}
		tn.flush()
		tn.deliver(all)
	}
}

func TestElectionAndCommit(t *testing.T) {
	tn := newTestNet(t, 3)
	tn.cores[1].Campaign()
	tn.flush()
	tn.settle(4)
	if !tn.cores[1].Status().Serving {
		t.Fatalf("node 1 not serving after campaign: %+v", tn.cores[1].Status())
	}
	if err := tn.cores[1].Propose([]byte("a"), 7); err != nil {
		t.Fatal(err)
	}
	if err := tn.cores[2].Propose([]byte("b"), 8); err != ErrNotMaster {
		t.Fatalf("follower Propose = %v, want ErrNotMaster", err)
	}
	tn.flush()
	tn.settle(4)
	tn.tick(3) // heartbeats carry the commit to followers
	for id := NodeID(1); id <= 3; id++ {
		apps := tn.apps[id]
		if len(apps) != 1 || string(apps[0].Value.Cmds[0]) != "a" {
			t.Fatalf("node %d applied %+v", id, apps)
		}
	}
	if got := tn.apps[1][0].Tags; len(got) != 1 || got[0] != 7 {
		t.Fatalf("master tags = %v, want [7]", got)
	}
	if tn.apps[2][0].Tags != nil {
		t.Fatalf("follower got tags %v", tn.apps[2][0].Tags)
	}
}

// A value accepted by a majority is chosen even if its master dies before
// anyone learns so; the next master must choose it again, not a no-op.
func TestRecoveryKeepsChosenValue(t *testing.T) {
	tn := newTestNet(t, 3)
	tn.cores[1].Campaign()
	tn.flush()
	tn.settle(4)
	if err := tn.cores[1].Propose([]byte("v"), 1); err != nil {
		t.Fatal(err)
	}
	tn.flush()
	// Node 2 accepts; every other message is lost, then node 1 dies.
	tn.deliver(func(m Message) bool { return m.Type == MsgAccept && m.To == 2 })
	tn.queue = nil
	tn.cores[1] = nil
	// Node 3 campaigns once leases ran out; node 2 reports the value.
	for i := 0; i < 40 && !tn.cores[3].Status().Serving && !tn.cores[2].Status().Serving; i++ {
		tn.tick(1)
	}
	tn.tick(6)
	for _, id := range []NodeID{2, 3} {
		apps := tn.apps[id]
		if len(apps) == 0 || len(apps[0].Value.Cmds) != 1 || string(apps[0].Value.Cmds[0]) != "v" {
			t.Fatalf("node %d applied %+v at instance 1, want the chosen value v", id, apps)
		}
	}
}

// While a master's lease runs, no acceptor that renewed it promises a
// rival, so a rival campaign fails.
func TestLeaseBlocksRival(t *testing.T) {
	tn := newTestNet(t, 3)
	tn.cores[1].Campaign()
	tn.flush()
	tn.settle(4)
	tn.tick(2)
	tn.cores[3].Campaign()
	tn.flush()
	tn.settle(4)
	if tn.cores[3].IsMaster() {
		t.Fatal("rival became master during a live lease")
	}
	if !tn.cores[1].IsMaster() {
		t.Fatal("master lost its lease to a rejected rival")
	}
}

// A hand-off moves mastership at once, without waiting out the lease.
func TestTransfer(t *testing.T) {
	tn := newTestNet(t, 3)
	tn.cores[1].Campaign()
	tn.flush()
	tn.settle(4)
	tn.tick(2)
	tn.cores[1].TransferTo(2)
	tn.flush()
	tn.settle(6)
	if tn.cores[1].IsMaster() || !tn.cores[2].Status().Serving {
		t.Fatalf("after transfer: node1 master=%v node2 %+v", tn.cores[1].IsMaster(), tn.cores[2].Status())
	}
}

// TestNextTickSkipsIdleTicks: in a settled group with no traffic, the
// master need only wake for its next heartbeat and a follower for its
// election timeout; an Accept in flight brings the master's wake to its
// retransmission.
func TestNextTickSkipsIdleTicks(t *testing.T) {
	tn := newTestNet(t, 3)
	tn.cores[1].Campaign()
	tn.flush()
	tn.settle(4)
	tn.tick(5)
	m, f := tn.cores[1], tn.cores[2]
	if !m.Status().Serving {
		t.Fatalf("node 1 not serving: %+v", m.Status())
	}
	hb := uint64(m.cfg.HeartbeatTicks)
	if got, want := m.NextTick(), m.lastHB+hb; got != want {
		t.Fatalf("master NextTick = %d, want the next heartbeat at %d (now %d)", got, want, m.Now())
	}
	if got := f.NextTick(); got != f.electAt || got <= f.Now()+1 {
		t.Fatalf("follower NextTick = %d, want its election timeout %d (now %d)", got, f.electAt, f.Now())
	}
	if err := m.Propose([]byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	tn.flush() // the Accept is queued, not delivered
	want := min(m.lastHB+hb, m.now+uint64(m.cfg.RetransmitTicks))
	if got := m.NextTick(); got != want {
		t.Fatalf("master NextTick with an Accept in flight = %d, want %d", got, want)
	}
	// The ticks before NextTick do nothing; the one at NextTick does.
	for m.Now()+1 < m.NextTick() {
		m.Tick()
		if m.HasReady() {
			t.Fatalf("tick %d before NextTick produced work", m.Now())
		}
	}
	m.Tick()
	if !m.HasReady() {
		t.Fatalf("tick %d at NextTick produced nothing (heartbeat or retransmission due)", m.Now())
	}
}
