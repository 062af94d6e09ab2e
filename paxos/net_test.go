package paxos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testNet is a hand-driven network of Cores for scenario tests and the
// data-driven scripts (core_test.go). Everything happens in one order,
// whatever the run: replicas are handled by increasing id, messages wait
// in one FIFO queue until the test delivers or drops them.
//
// A replica's Ready is carried out as soon as it has one: its writes are
// durable at once (so a crash loses nothing it issued), its Messages and
// MessagesAfterSync join the queue — votes addressed to the replica itself
// too, so that a script can hold them back like any other message — and
// its applied instances are recorded. After every Ready the Core's own
// invariants (checkInvariants) must hold, or the test fails.
type testNet struct {
	t     testing.TB
	cfg   Config
	nodes []*netNode
	queue []Message
	out   *strings.Builder // what happened, for scripts; nil: not recorded
	// cut holds the one-way links (from, to) that lose every message,
	// as a transport does to a peer removed from the cluster.
	cut map[[2]NodeID]bool
}

type netNode struct {
	id   NodeID
	core *Core // nil while crashed
	disk *simDisk
	apps []Applied
}

// newTestNet starts n replicas of one group (ids 1..n) with cfg's timing.
func newTestNet(t testing.TB, n int, cfg Config) *testNet {
	tn := &testNet{t: t, cfg: cfg}
	tn.cfg.Peers = nil
	for i := 1; i <= n; i++ {
		tn.cfg.Peers = append(tn.cfg.Peers, NodeID(i))
	}
	for _, id := range tn.cfg.Peers {
		nd := &netNode{id: id, disk: &simDisk{log: map[uint64]Entry{}, logStart: 1}}
		tn.nodes = append(tn.nodes, nd)
		tn.start(nd)
	}
	return tn
}

// newTestNet3 is the three-replica group most scenarios use.
func newTestNet3(t testing.TB) *testNet {
	return newTestNet(t, 3, Config{Group: 1, HeartbeatTicks: 2, LeaseTicks: 10, MaxInflight: 4})
}

func (tn *testNet) node(id NodeID) *netNode {
	if id == 0 || int(id) > len(tn.nodes) {
		tn.t.Fatalf("no node %d", id)
	}
	return tn.nodes[id-1]
}

// core returns node id's Core; the test fails if it is crashed.
func (tn *testNet) core(id NodeID) *Core {
	c := tn.node(id).core
	if c == nil {
		tn.t.Fatalf("node %d is down", id)
	}
	return c
}

func (tn *testNet) logf(format string, args ...any) {
	if tn.out != nil {
		fmt.Fprintf(tn.out, format+"\n", args...)
	}
}

// start (re)starts nd from what its disk holds.
func (tn *testNet) start(nd *netNode) {
	cfg := tn.cfg
	cfg.ID = nd.id
	d := nd.disk
	st := InitState{Hard: d.hard, LogStart: d.logStart, Applied: uint64(len(d.sm)), Membership: d.mem}
	var above []uint64
	for i := range d.log {
		if i > st.Applied {
			above = append(above, i)
		}
	}
	slices.Sort(above)
	for _, i := range above {
		st.Entries = append(st.Entries, d.log[i])
	}
	c, err := NewCore(cfg, st, d)
	if err != nil {
		tn.t.Fatalf("node %d: NewCore: %v", nd.id, err)
	}
	nd.core = c
}

// crash stops node id; its disk stays.
func (tn *testNet) crash(id NodeID) {
	tn.node(id).core = nil
}

// restart starts a crashed node id again from its disk.
func (tn *testNet) restart(id NodeID) {
	nd := tn.node(id)
	if nd.core != nil {
		tn.t.Fatalf("node %d is not down", id)
	}
	tn.start(nd)
}

// flush carries out every replica's Ready, by increasing id, until none
// has one.
func (tn *testNet) flush() {
	for again := true; again; {
		again = false
		for _, nd := range tn.nodes {
			if nd.core == nil || !nd.core.HasReady() {
				continue
			}
			again = true
			tn.handleReady(nd)
		}
	}
}

func (tn *testNet) handleReady(nd *netNode) {
	c := nd.core
	rd := c.Ready()
	d := nd.disk
	for _, e := range rd.Entries {
		if e.Instance > uint64(len(d.sm)) && e.Instance >= d.logStart {
			d.log[e.Instance] = e
		}
	}
	d.hard = rd.HardState
	for _, ms := range [][]Message{rd.Messages, rd.MessagesAfterSync} {
		for _, m := range ms {
			if !tn.cut[[2]NodeID{m.From, m.To}] {
				tn.queue = append(tn.queue, m)
			}
		}
	}
	if rd.SoftChanged {
		tn.logf("n%d: %s", nd.id, fmtSoft(rd.Soft))
	}
	for _, a := range rd.Apply {
		nd.apps = append(nd.apps, a)
		d.sm = append(d.sm, valKey(a.Value))
		if a.Value.Change != nil {
			if d.mem.IsZero() {
				d.mem = Membership{Members: tn.cfg.Peers}
			}
			d.mem = d.mem.Apply(*a.Value.Change)
		}
		if a.Tags != nil {
			tn.logf("n%d: apply %d %s tags=%v", nd.id, a.Instance, fmtValue(a.Value), a.Tags)
		} else {
			tn.logf("n%d: apply %d %s", nd.id, a.Instance, fmtValue(a.Value))
		}
	}
	for _, f := range rd.Failed {
		tn.logf("n%d: failed tags=%v: %v", nd.id, f.Tags, f.Err)
	}
	for _, p := range rd.SendSnapshot {
		tn.logf("n%d: snapshot to %d", nd.id, p)
	}
	c.Advance(rd)
	if err := c.checkInvariants(); err != nil {
		tn.t.Fatalf("after Ready: %v", err)
	}
}

// deliver steps every queued message that keep accepts into its recipient,
// in queue order, and carries out the Readys that follow; the messages it
// does not accept stay queued. Messages sent meanwhile join the queue for
// a later deliver. It returns how many it delivered.
func (tn *testNet) deliver(keep func(Message) bool) int {
	q := tn.queue
	tn.queue = nil
	var rest []Message
	n := 0
	for _, m := range q {
		if !keep(m) {
			rest = append(rest, m)
			continue
		}
		n++
		nd := tn.node(m.To)
		if nd.core == nil {
			tn.logf("%s (down)", fmtMsg(m))
			continue
		}
		tn.logf("%s", fmtMsg(m))
		nd.core.Step(m)
		tn.flush()
	}
	tn.queue = append(rest, tn.queue...)
	return n
}

// drop removes the queued messages that match and returns how many.
func (tn *testNet) drop(match func(Message) bool) int {
	n := 0
	tn.queue = slices.DeleteFunc(tn.queue, func(m Message) bool {
		if match(m) {
			tn.logf("%s dropped", fmtMsg(m))
			n++
			return true
		}
		return false
	})
	return n
}

func all(Message) bool { return true }

// stabilize delivers until no message is left, or fails after max rounds.
func (tn *testNet) stabilize(max int) {
	for range max {
		if len(tn.queue) == 0 {
			return
		}
		tn.deliver(all)
	}
	tn.t.Fatalf("still %d messages queued after %d rounds", len(tn.queue), max)
}

// tickOnly advances the clocks of the given replicas (every live one when
// ids is empty) once and carries out their Readys, delivering nothing.
func (tn *testNet) tickOnly(ids ...NodeID) {
	for _, nd := range tn.nodes {
		if nd.core != nil && (len(ids) == 0 || slices.Contains(ids, nd.id)) {
			nd.core.Tick()
		}
	}
	tn.flush()
}

// tick advances every live replica's clock n times, delivering everything
// queued after each tick.
func (tn *testNet) tick(n int) {
	for range n {
		tn.tickOnly()
		tn.deliver(all)
	}
}

// elect makes node id master and lets the group settle.
func (tn *testNet) elect(id NodeID) {
	tn.core(id).Campaign()
	tn.flush()
	tn.stabilize(20)
	if !tn.core(id).Status().Serving {
		tn.t.Fatalf("node %d not serving after its campaign: %+v", id, tn.core(id).Status())
	}
}

func fmtSoft(s SoftState) string {
	switch {
	case s.Master == 0 && s.Ballot.IsZero():
		return "no master"
	case s.Master == 0:
		return fmt.Sprintf("master of %s released", s.Ballot)
	case s.Serving:
		return fmt.Sprintf("master %d ballot %s serving", s.Master, s.Ballot)
	}
	return fmt.Sprintf("master %d ballot %s", s.Master, s.Ballot)
}

func fmtValue(v Value) string {
	if v.Change != nil {
		return "change" + v.Change.String()
	}
	if len(v.Cmds) == 0 {
		return "noop"
	}
	cmds := make([]string, len(v.Cmds))
	for i, c := range v.Cmds {
		cmds[i] = string(c)
	}
	return "[" + strings.Join(cmds, " ") + "]"
}

// fmtMsg formats m on one line with the fields its type uses.
func fmtMsg(m Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d->%d %s b=%s", m.From, m.To, m.Type, m.Ballot)
	switch m.Type {
	case MsgPrepare:
		fmt.Fprintf(&b, " i=%d", m.Instance)
		if !m.Hint.IsZero() {
			fmt.Fprintf(&b, " released=%s", m.Hint)
		}
	case MsgPromise:
		fmt.Fprintf(&b, " last=%d c=%d", m.Instance, m.Committed)
	case MsgAccept:
		fmt.Fprintf(&b, " c=%d", m.Committed)
		if m.WriteOnly {
			b.WriteString(" write-only")
		}
	case MsgAccepted:
		fmt.Fprintf(&b, " i=%d", m.Instance)
	case MsgHeartbeat:
		fmt.Fprintf(&b, " c=%d t=%d", m.Committed, m.Tick)
	case MsgHeartbeatAck:
		fmt.Fprintf(&b, " c=%d t=%d", m.Committed, m.Tick)
	case MsgLearn:
		fmt.Fprintf(&b, " i=%d", m.Instance)
	case MsgLearnReply:
		fmt.Fprintf(&b, " i=%d c=%d", m.Instance, m.Committed)
	}
	if m.Reject {
		fmt.Fprintf(&b, " reject hint=%s", m.Hint)
	}
	if m.Snapshot {
		b.WriteString(" snapshot")
	}
	for _, e := range m.Entries {
		fmt.Fprintf(&b, " %d@%s=%s", e.Instance, e.Ballot, fmtValue(e.Value))
	}
	return b.String()
}
