package paxos

import (
	"testing"
)

func TestElectionAndCommit(t *testing.T) {
	tn := newTestNet3(t)
	tn.core(1).Campaign()
	tn.flush()
	tn.settle(4)
	if !tn.core(1).Status().Serving {
		t.Fatalf("node 1 not serving after campaign: %+v", tn.core(1).Status())
	}
	if err := tn.core(1).Propose([]byte("a"), 7); err != nil {
		t.Fatal(err)
	}
	if err := tn.core(2).Propose([]byte("b"), 8); err != ErrNotMaster {
		t.Fatalf("follower Propose = %v, want ErrNotMaster", err)
	}
	tn.flush()
	tn.settle(4)
	tn.tick(3) // heartbeats carry the commit to followers
	for id := NodeID(1); id <= 3; id++ {
		apps := tn.node(id).apps
		if len(apps) != 1 || string(apps[0].Value.Cmds[0]) != "a" {
			t.Fatalf("node %d applied %+v", id, apps)
		}
	}
	if got := tn.node(1).apps[0].Tags; len(got) != 1 || got[0] != 7 {
		t.Fatalf("master tags = %v, want [7]", got)
	}
	if tn.node(2).apps[0].Tags != nil {
		t.Fatalf("follower got tags %v", tn.node(2).apps[0].Tags)
	}
}

// A value accepted by a majority is chosen even if its master dies before
// anyone learns so; the next master must choose it again, not a no-op.
func TestRecoveryKeepsChosenValue(t *testing.T) {
	tn := newTestNet3(t)
	tn.core(1).Campaign()
	tn.flush()
	tn.settle(4)
	if err := tn.core(1).Propose([]byte("v"), 1); err != nil {
		t.Fatal(err)
	}
	tn.flush()
	// Node 2 accepts; every other message is lost, then node 1 dies.
	tn.deliver(func(m Message) bool { return m.Type == MsgAccept && m.To == 2 })
	tn.queue = nil
	tn.crash(1)
	// Node 3 campaigns once leases ran out; node 2 reports the value.
	for i := 0; i < 40 && !tn.core(3).Status().Serving && !tn.core(2).Status().Serving; i++ {
		tn.tick(1)
	}
	tn.tick(6)
	for _, id := range []NodeID{2, 3} {
		apps := tn.node(id).apps
		if len(apps) == 0 || len(apps[0].Value.Cmds) != 1 || string(apps[0].Value.Cmds[0]) != "v" {
			t.Fatalf("node %d applied %+v at instance 1, want the chosen value v", id, apps)
		}
	}
}

// While a master's lease runs, no acceptor that renewed it promises a
// rival, so a rival campaign fails.
func TestLeaseBlocksRival(t *testing.T) {
	tn := newTestNet3(t)
	tn.core(1).Campaign()
	tn.flush()
	tn.settle(4)
	tn.tick(2)
	tn.core(3).Campaign()
	tn.flush()
	tn.settle(4)
	if tn.core(3).IsMaster() {
		t.Fatal("rival became master during a live lease")
	}
	if !tn.core(1).IsMaster() {
		t.Fatal("master lost its lease to a rejected rival")
	}
}

// A hand-off moves mastership at once, without waiting out the lease.
func TestTransfer(t *testing.T) {
	tn := newTestNet3(t)
	tn.core(1).Campaign()
	tn.flush()
	tn.settle(4)
	tn.tick(2)
	tn.core(1).TransferTo(2)
	tn.flush()
	tn.settle(6)
	if tn.core(1).IsMaster() || !tn.core(2).Status().Serving {
		t.Fatalf("after transfer: node1 master=%v node2 %+v", tn.core(1).IsMaster(), tn.core(2).Status())
	}
}

// TestNextTickSkipsIdleTicks: in a settled group with no traffic, the
// master need only wake for its next heartbeat and a follower for its
// election timeout; an Accept in flight brings the master's wake to its
// retransmission.
func TestNextTickSkipsIdleTicks(t *testing.T) {
	tn := newTestNet3(t)
	tn.core(1).Campaign()
	tn.flush()
	tn.settle(4)
	tn.tick(5)
	m, f := tn.core(1), tn.core(2)
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
