package paxos

import (
	"strings"
	"testing"
)

// TestCheckInvariantsCatches breaks each relation of a healthy group's
// Cores by hand and checks that checkInvariants names it: a check that
// cannot fail would prove nothing in the simulator.
func TestCheckInvariantsCatches(t *testing.T) {
	cases := []struct {
		name   string
		want   string
		node   NodeID // 1 is the master, 2 a follower
		break_ func(c *Core)
	}{
		{"applied above committed", "C1:", 2, func(c *Core) { c.applied = c.hs.Committed + 1; c.last = c.applied }},
		{"log starts above applied", "C2:", 2, func(c *Core) { c.logStart = c.applied + 2 }},
		{"log start zero", "C2:", 2, func(c *Core) { c.logStart = 0 }},
		{"applied while awaiting a snapshot", "C2:", 2, func(c *Core) { c.needSnap = true }},
		{"last below committed", "C3:", 1, func(c *Core) { c.last = c.hs.Committed - 1 }},
		{"entry at applied", "C4:", 2, func(c *Core) { c.entries[c.applied] = Entry{Instance: c.applied} }},
		{"entry under another instance", "C4:", 1, func(c *Core) { c.entries[c.last] = Entry{Instance: c.last + 1} }},
		{"promise above max round", "C5:", 2, func(c *Core) { c.hs.Promised.Round = c.maxRound + 1 }},
		{"master with another's ballot", "C5:", 1, func(c *Core) { c.ballot.Node = 2 }},
		{"follower with promises", "C6:", 2, func(c *Core) { c.promises = map[NodeID]bool{} }},
		{"candidate without recovered", "C6:", 1, func(c *Core) { c.role = candidate; c.promises = map[NodeID]bool{} }},
		{"master without in-flight map", "C7:", 1, func(c *Core) { c.inflight = nil }},
		{"follower with a lease", "C7:", 2, func(c *Core) { c.leaseExpiry = 5 }},
		{"follower with a queue", "C7:", 2, func(c *Core) { c.queue = [][]byte{{1}}; c.queueTags = []uint64{1}; c.queueBytes = 5 }},
		{"in-flight at next", "C8:", 1, func(c *Core) {
			c.inflight[c.nextInst] = &inflight{entry: Entry{Instance: c.nextInst, Ballot: c.ballot}}
		}},
		{"in-flight with an old ballot", "C8:", 1, func(c *Core) { c.inflight[c.nextInst-1] = &inflight{entry: Entry{Instance: c.nextInst - 1}} }},
		{"next not above committed", "C8:", 1, func(c *Core) { c.nextInst = c.hs.Committed }},
		{"queue without tags", "C9:", 1, func(c *Core) { c.queue = [][]byte{{1}}; c.queueBytes = 5 }},
		{"queue bytes off", "C9:", 1, func(c *Core) { c.queueBytes = 1 }},
		{"own proposal applied", "C10:", 1, func(c *Core) { c.mine[c.applied] = myProposal{} }},
		{"follower names itself", "C11:", 2, func(c *Core) { c.soft.Master = 2 }},
		{"master publishes another ballot", "C11:", 1, func(c *Core) { c.soft.Ballot = Ballot{} }},
		{"follower serving", "C11:", 2, func(c *Core) { c.soft.Serving = true }},
		{"master serving too early", "C11:", 1, func(c *Core) { c.servingAt = c.applied + 1 }},
		{"vote before the sync", "C12:", 2, func(c *Core) { c.msgs = append(c.msgs, Message{Type: MsgAccepted, From: 2, To: 1, Group: 1}) }},
		{"message to itself before the sync", "C12:", 1, func(c *Core) { c.msgs = append(c.msgs, Message{Type: MsgAccept, From: 1, To: 1, Group: 1}) }},
		{"request after the sync", "C12:", 1, func(c *Core) { c.msgsAfter = append(c.msgsAfter, Message{Type: MsgPrepare, From: 1, To: 2, Group: 1}) }},
		{"voters without quorum sync", "C15:", 1, func(c *Core) { c.voters = []NodeID{2} }},
		{"follower with voters", "C15:", 2, func(c *Core) { c.cfg.QuorumSync = true; c.voters = []NodeID{3} }},
		{"master votes for itself", "C15:", 1, func(c *Core) { c.cfg.QuorumSync = true; c.voters = []NodeID{1} }},
		{"master with quorum sync and no voters", "C15:", 1, func(c *Core) { c.cfg.QuorumSync = true }},
		{"vote on unsynced entries without a sync", "C15:", 2, func(c *Core) {
			c.unsynced, c.hsDirty = true, false
			c.msgsAfter = append(c.msgsAfter, Message{Type: MsgAccepted, From: 2, To: 1, Group: 1, Instance: 2})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTestNet3(t)
			tn.elect(1)
			if err := tn.core(1).Propose([]byte("a"), 1); err != nil {
				t.Fatal(err)
			}
			tn.flush()
			tn.stabilize(20)
			tn.tick(4) // followers learn the commit and apply
			// One more in flight, undelivered.
			if err := tn.core(1).Propose([]byte("b"), 2); err != nil {
				t.Fatal(err)
			}
			tn.flush()
			c := tn.core(tc.node)
			if c.applied == 0 {
				t.Fatalf("node %d applied nothing; the setup is wrong", tc.node)
			}
			if err := c.checkInvariants(); err != nil {
				t.Fatalf("healthy core: %v", err)
			}
			tc.break_(c)
			err := c.checkInvariants()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkInvariants = %v, want a %s violation", err, tc.want)
			}
		})
	}
}
