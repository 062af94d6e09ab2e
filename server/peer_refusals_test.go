package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// TestConsensusLimitsConfig: max_round_jump and max_instance_ahead are
// keys of the node's file, default to the consensus core's defaults, and
// a max_instance_ahead below instance_window (or two checkpoint
// intervals) is refused.
func TestConsensusLimitsConfig(t *testing.T) {
	t.Parallel()
	var c ConsensusLimits
	if err := DecodeStrict([]byte(`{"max_round_jump": 1000, "max_instance_ahead": 5000}`), &c); err != nil || c.MaxRoundJump != 1000 || c.MaxInstanceAhead != 5000 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	var d ConsensusLimits
	d.ensureDefaults(paxos.DefaultMaxInflight)
	if d.MaxRoundJump != paxos.DefaultMaxRoundJump || d.MaxInstanceAhead != paxos.DefaultMaxInstanceAhead {
		t.Fatalf("defaults %+v, want round jump %d and instance ahead %d", d, uint64(paxos.DefaultMaxRoundJump), paxos.DefaultMaxInstanceAhead)
	}
	if errs := d.validate(paxos.DefaultMaxInflight); len(errs) != 0 {
		t.Fatalf("defaults refused: %v", errs)
	}
	wide := ConsensusLimits{}
	wide.ensureDefaults(100000)
	if wide.MaxInstanceAhead < 100000 || len(wide.validate(100000)) != 0 {
		t.Fatalf("with instance_window 100000: %+v, %v", wide, wide.validate(100000))
	}
	for _, tc := range []struct {
		ahead  uint64
		window int
	}{{8, 4}, {5000, 6000}} {
		l := ConsensusLimits{MaxRoundJump: 1, MaxInstanceAhead: tc.ahead}
		errs := l.validate(tc.window)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "max_instance_ahead") {
			t.Errorf("max_instance_ahead %d with instance_window %d: %v, want refused", tc.ahead, tc.window, errs)
		}
	}
}

// TestPeerRefusalsMetric: what a node's groups refuse from a peer
// reaches /metrics as paxlock_peer_messages_refused_total by reason, and
// the node's max_round_jump and max_instance_ahead are the bounds its
// groups apply: a round 10^6 above the highest seen and an entry 5,000
// instances ahead, both within the defaults, are refused under limits
// of 1,000 rounds and 4,096 instances. Every group goes on serving.
func TestPeerRefusalsMetric(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) {
		c.MaxRoundJump = 1000
		c.MaxInstanceAhead = 4096
	})
	s := tc.nodes[0]
	admin := tc.cfgs[0].AdminAddr
	fams := scrape(t, admin)
	for _, reason := range []string{"foreign_ballot", "round_jump", "instance_ahead", "unasked_answer", "unrequested_snapshot", "misaddressed"} {
		if !hasSeries(fams, "paxlock_peer_messages_refused_total", map[string]string{"reason": reason}) {
			t.Errorf("no paxlock_peer_messages_refused_total{reason=%q} before any refusal", reason)
		}
		if v := sumOf(fams, "paxlock_peer_messages_refused_total", map[string]string{"reason": reason}); v != 0 {
			t.Errorf("%s: %v refused on a fresh node", reason, v)
		}
	}

	// Node 2 is no member: its messages are heard (a node being added
	// may send them) and judged like any peer's.
	g := group.ID(3).ReplicaGroup()
	val := paxos.Value{Cmds: [][]byte{[]byte("x")}}
	rep := s.replica(3)
	committed, applied, _ := rep.Progress()
	s.host.Deliver([]paxos.Message{
		{Type: paxos.MsgAccept, Group: g, From: 2, To: 1, Ballot: paxos.Ballot{Round: 1_000_000, Node: 2}},
		{Type: paxos.MsgAccept, Group: g, From: 2, To: 1, Ballot: paxos.Ballot{Round: 50, Node: 3}},
		{Type: paxos.MsgLearnReply, Group: g, From: 2, To: 1, Committed: committed + 10, Entries: []paxos.Entry{{Instance: committed + 1, Value: val}}},
		{Type: paxos.MsgSnapshot, Group: g, From: 2, To: 1, Instance: applied + 1000, ChunkSeq: 0, LastChunk: true},
		{Type: paxos.MsgAccept, Group: g, From: 2, To: 1, Ballot: paxos.Ballot{Round: 60, Node: 2},
			Entries: []paxos.Entry{{Instance: committed + 5000, Ballot: paxos.Ballot{Round: 60, Node: 2}, Value: val}}},
	})
	want := map[string]float64{"round_jump": 1, "foreign_ballot": 1, "unasked_answer": 1, "unrequested_snapshot": 1, "instance_ahead": 1, "misaddressed": 0}
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		fams := scrape(t, admin)
		got := map[string]float64{}
		for reason := range want {
			got[reason] = sumOf(fams, "paxlock_peer_messages_refused_total", map[string]string{"reason": reason})
		}
		for reason, n := range want {
			if got[reason] != n {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	}, "the refusals counted by reason, want %v", want)
	if r := rep.Refusals(); r.Total() != 5 || r[paxos.RefusedSnapshot] != 1 {
		t.Errorf("group 3 refused %v, want one of each reason", r)
	}
	if n := sumOf(scrape(t, admin), "paxlock_peer_messages_refused_total", nil); n != 5 {
		t.Errorf("%v refused over all reasons, want 5", n)
	}

	// The group the messages went to still has a master: this node,
	// whose next campaign out-ballots the plausible round 60.
	testutil.Eventually(t, 30*time.Second, func() bool { return rep.Status().Serving }, "group 3 serving again")
}
