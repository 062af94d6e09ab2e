package paxos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/paxlock/paxlock/internal/scripttest"
)

// TestCoreScripts runs the stories in testdata/core: a group of Cores on a
// testNet (net_test.go) driven one command at a time, each command's
// output compared with the script. Every Core's invariants are checked
// after every Ready. Rewrite the expected output after a deliberate
// change with
//
//	go test ./paxos -run TestCoreScripts -rewrite
//
// and read the diff: it is the change in behaviour.
//
// Commands (nodes are named by number; "n=" arguments are optional):
//
//	init [nodes=3] [heartbeat=2] [lease=10] [retransmit=2] [inflight=4]
//	    [quorumsync=false]
//	    a new group, every replica a follower at tick 0
//	campaign <node>           the node campaigns now
//	propose <node> <cmd> [tag=<n>]
//	    proposes a command; prints the error if the Core refuses it
//	transfer <node> <to>      the master hands over to <to>
//	drain <node>              the replica gives up mastership for good
//	    (Core.Drain)
//	prefer <node> <p>         sets the node's placement hint (0: none)
//	tick [<ticks>] [node=<n>] advances the clocks of every live replica (or
//	    one) without delivering anything
//	run ticks=<n> [quiet]     n times: tick every live replica, then deliver
//	    everything queued (a healthy network)
//	deliver [from=] [to=] [type=] [quiet]
//	    steps the queued messages that match, in queue order; what they
//	    cause is queued for later
//	drop [from=] [to=] [type=]  loses the queued messages that match
//	stabilize [quiet]         delivers until nothing is queued
//	queue                     prints the queued messages
//	stop <node>               the driver stops the replica (Core.Flush with
//	    ErrStopped, its last Ready handled), then crashes it
//	crash <node>              stops a replica; its disk stays (every write
//	    it issued is durable)
//	restart <node>            starts it again from its disk
//	status [<node>]           role, view of mastership, lease and progress
//	applied <node>            what the replica applied, in order
//	next-tick <node>          Now and NextTick
//	idle-ticks <node>         ticks the node alone up to its NextTick,
//	    failing if a tick before it produced work
//	join <node>               starts a new node, the next id, with an empty
//	    disk and the group's first member set; it learns the log
//	change <node> add=<id>|remove=<id> [tag=<n>]
//	    proposes a membership change; prints the error if the Core refuses
//	members [<node>]          the member set in force and a change pending
//	cut <from> <to>           the link from one node to another loses every
//	    message sent from now on (as a transport does to a removed peer)
//
// Delivered and dropped messages print as
// "from->to Type b=ballot fields... instance@ballot=[cmds]"; events print as
// "nX: ...": a change of its view of mastership, an applied instance (with
// the proposer's tags on the replica that proposed it), a failed proposal.
func TestCoreScripts(t *testing.T) {
	coreCommands.Run(t, "testdata/core", func(*testing.T) *coreScript { return &coreScript{} })
}

// coreScript is what a script of testdata/core drives: its testNet, nil
// until init.
type coreScript struct {
	tn *testNet
}

// coreCommands are the scripts' commands (TestCoreScripts lists them).
var coreCommands = scripttest.Registry[*coreScript]{
	"init":       (*coreScript).handleInit,
	"campaign":   (*coreScript).handleCampaign,
	"propose":    (*coreScript).handlePropose,
	"transfer":   (*coreScript).handleTransfer,
	"drain":      (*coreScript).handleDrain,
	"prefer":     (*coreScript).handlePrefer,
	"tick":       (*coreScript).handleTick,
	"run":        (*coreScript).handleRun,
	"deliver":    (*coreScript).handleDeliver,
	"drop":       (*coreScript).handleDrop,
	"stabilize":  (*coreScript).handleStabilize,
	"queue":      (*coreScript).handleQueue,
	"stop":       (*coreScript).handleStop,
	"crash":      (*coreScript).handleCrash,
	"restart":    (*coreScript).handleRestart,
	"status":     (*coreScript).handleStatus,
	"applied":    (*coreScript).handleApplied,
	"next-tick":  (*coreScript).handleNextTick,
	"join":       (*coreScript).handleJoin,
	"change":     (*coreScript).handleChange,
	"members":    (*coreScript).handleMembers,
	"idle-ticks": (*coreScript).handleIdleTicks,
	"cut":        (*coreScript).handleCut,
}

func (s *coreScript) handleCut(t *testing.T, d *datadriven.TestData) {
	from, to := NodeID(scripttest.PosInt(t, d, 0)), NodeID(scripttest.PosInt(t, d, 1))
	if s.tn.cut == nil {
		s.tn.cut = map[[2]NodeID]bool{}
	}
	s.tn.cut[[2]NodeID{from, to}] = true
}

// Begin implements scripttest.Env: every command but init needs the
// group init makes, and starts with empty output.
func (s *coreScript) Begin(t *testing.T, d *datadriven.TestData) {
	if d.Cmd != "init" && s.tn == nil {
		d.Fatalf(t, "%s before init", d.Cmd)
	}
	if s.tn != nil {
		s.tn.t = t
		s.tn.out = &strings.Builder{}
	}
}

// Output implements scripttest.Env.
func (s *coreScript) Output() string { return s.tn.out.String() }

func (s *coreScript) handleInit(t *testing.T, d *datadriven.TestData) {
	nodes := 3
	cfg := Config{Group: 1, HeartbeatTicks: 2, LeaseTicks: 10, MaxInflight: 4}
	d.MaybeScanArgs(t, "nodes", &nodes)
	d.MaybeScanArgs(t, "heartbeat", &cfg.HeartbeatTicks)
	d.MaybeScanArgs(t, "lease", &cfg.LeaseTicks)
	d.MaybeScanArgs(t, "retransmit", &cfg.RetransmitTicks)
	d.MaybeScanArgs(t, "inflight", &cfg.MaxInflight)
	d.MaybeScanArgs(t, "quorumsync", &cfg.QuorumSync)
	s.tn = newTestNet(t, nodes, cfg)
	s.tn.out = &strings.Builder{}
}

func (s *coreScript) handleCampaign(t *testing.T, d *datadriven.TestData) {
	s.tn.core(posNode(t, d, 0)).Campaign()
	s.tn.flush()
}

func (s *coreScript) handlePropose(t *testing.T, d *datadriven.TestData) {
	tn := s.tn
	id := posNode(t, d, 0)
	cmd := scripttest.Pos(t, d, 1)
	tag := uint64(0)
	d.MaybeScanArgs(t, "tag", &tag)
	if err := tn.core(id).Propose([]byte(cmd), tag); err != nil {
		tn.logf("n%d: propose %s: %v", id, cmd, err)
	}
	tn.flush()
}

func (s *coreScript) handleTransfer(t *testing.T, d *datadriven.TestData) {
	s.tn.core(posNode(t, d, 0)).TransferTo(posNode(t, d, 1))
	s.tn.flush()
}

func (s *coreScript) handleDrain(t *testing.T, d *datadriven.TestData) {
	s.tn.core(posNode(t, d, 0)).Drain()
	s.tn.flush()
}

func (s *coreScript) handlePrefer(t *testing.T, d *datadriven.TestData) {
	s.tn.core(posNode(t, d, 0)).SetPreferred(posNode(t, d, 1))
	s.tn.flush()
}

func (s *coreScript) handleTick(t *testing.T, d *datadriven.TestData) {
	n := 1
	if scripttest.HasPos(d, 0) {
		n = scripttest.PosInt(t, d, 0)
	}
	var ids []NodeID
	if d.HasArg("node") {
		var id int
		d.ScanArgs(t, "node", &id)
		ids = append(ids, NodeID(id))
	}
	for range n {
		s.tn.tickOnly(ids...)
	}
}

func (s *coreScript) handleRun(t *testing.T, d *datadriven.TestData) {
	tn := s.tn
	var n int
	d.ScanArgs(t, "ticks", &n)
	out := tn.out
	for range n {
		tn.tickOnly()
		tn.quietly(d.HasArg("quiet"), func() { tn.deliver(all) })
	}
	tn.out = out
}

func (s *coreScript) handleDeliver(t *testing.T, d *datadriven.TestData) {
	f := msgFilter(t, d)
	s.tn.quietly(d.HasArg("quiet"), func() { s.tn.deliver(f) })
}

func (s *coreScript) handleDrop(t *testing.T, d *datadriven.TestData) {
	s.tn.drop(msgFilter(t, d))
}

func (s *coreScript) handleStabilize(_ *testing.T, d *datadriven.TestData) {
	s.tn.quietly(d.HasArg("quiet"), func() { s.tn.stabilize(100) })
}

func (s *coreScript) handleQueue(*testing.T, *datadriven.TestData) {
	for _, m := range s.tn.queue {
		s.tn.logf("%s", fmtMsg(m))
	}
}

// handleStop is the driver stopping: Flush, then the Ready it leaves.
func (s *coreScript) handleStop(t *testing.T, d *datadriven.TestData) {
	nd := s.tn.node(posNode(t, d, 0))
	nd.core.Flush(ErrStopped)
	s.tn.handleReady(nd)
	s.tn.crash(nd.id)
}

func (s *coreScript) handleCrash(t *testing.T, d *datadriven.TestData) {
	s.tn.crash(posNode(t, d, 0))
}

func (s *coreScript) handleRestart(t *testing.T, d *datadriven.TestData) {
	s.tn.restart(posNode(t, d, 0))
	s.tn.flush()
}

func (s *coreScript) handleStatus(t *testing.T, d *datadriven.TestData) {
	for _, nd := range s.tn.nodes {
		if len(d.CmdArgs) > 0 && nd.id != posNode(t, d, 0) {
			continue
		}
		s.tn.logf("%s", fmtStatus(nd))
	}
}

func (s *coreScript) handleApplied(t *testing.T, d *datadriven.TestData) {
	for _, a := range s.tn.node(posNode(t, d, 0)).apps {
		s.tn.logf("%d: %s", a.Instance, fmtValue(a.Value))
	}
}

func (s *coreScript) handleNextTick(t *testing.T, d *datadriven.TestData) {
	c := s.tn.core(posNode(t, d, 0))
	s.tn.logf("n%d: now %d, next tick %d", c.cfg.ID, c.Now(), c.NextTick())
}

func (s *coreScript) handleJoin(t *testing.T, d *datadriven.TestData) {
	tn := s.tn
	id := posNode(t, d, 0)
	if int(id) != len(tn.nodes)+1 {
		d.Fatalf(t, "join %d: the next id is %d", id, len(tn.nodes)+1)
	}
	nd := &netNode{id: id, disk: &simDisk{log: map[uint64]Entry{}, logStart: 1, mem: Membership{Members: tn.cfg.Peers}}}
	tn.nodes = append(tn.nodes, nd)
	tn.start(nd)
	tn.flush()
}

func (s *coreScript) handleChange(t *testing.T, d *datadriven.TestData) {
	id := posNode(t, d, 0)
	var ch MemberChange
	var add, remove int
	tag := uint64(0)
	d.MaybeScanArgs(t, "add", &add)
	d.MaybeScanArgs(t, "remove", &remove)
	d.MaybeScanArgs(t, "tag", &tag)
	ch.Add, ch.Remove = NodeID(add), NodeID(remove)
	if err := s.tn.core(id).ProposeMembership(ch, tag); err != nil {
		s.tn.logf("n%d: change %s: %v", id, ch, err)
	}
	s.tn.flush()
}

func (s *coreScript) handleMembers(t *testing.T, d *datadriven.TestData) {
	for _, nd := range s.tn.nodes {
		if len(d.CmdArgs) > 0 && nd.id != posNode(t, d, 0) || nd.core == nil {
			continue
		}
		ms := nd.core.Membership()
		pending := "none"
		if ms.Pending != nil {
			pending = fmt.Sprintf("%s at %d", ms.Pending, ms.PendingAt)
		}
		s.tn.logf("n%d: members %s pending %s", nd.id, ms.Current, pending)
	}
}

func (s *coreScript) handleIdleTicks(t *testing.T, d *datadriven.TestData) {
	c := s.tn.core(posNode(t, d, 0))
	from := c.Now()
	for c.Now()+1 < c.NextTick() {
		c.Tick()
		if c.HasReady() {
			d.Fatalf(t, "n%d: tick %d, before NextTick %d, produced work", c.cfg.ID, c.Now(), c.NextTick())
		}
	}
	if c.Now() == from {
		s.tn.logf("n%d: no tick to skip; now %d, next tick %d", c.cfg.ID, c.Now(), c.NextTick())
	} else {
		s.tn.logf("n%d: ticks %d..%d did nothing; now %d, next tick %d", c.cfg.ID, from+1, c.Now(), c.Now(), c.NextTick())
	}
}

// quietly runs f, keeping from the output the messages it delivers but
// not the events (lines starting with "n").
func (tn *testNet) quietly(quiet bool, f func()) {
	if !quiet {
		f()
		return
	}
	out := tn.out
	tn.out = &strings.Builder{}
	f()
	for _, l := range strings.SplitAfter(tn.out.String(), "\n") {
		if strings.HasPrefix(l, "n") {
			out.WriteString(l)
		}
	}
	tn.out = out
}

func posNode(t *testing.T, d *datadriven.TestData, i int) NodeID {
	return NodeID(scripttest.PosInt(t, d, i))
}

// msgFilter matches the messages a deliver or drop names by from=, to= and
// type= (each may list several values); no argument matches everything.
func msgFilter(t *testing.T, d *datadriven.TestData) func(Message) bool {
	var from, to []NodeID
	var types []string
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "from", "to":
			for _, v := range a.Vals {
				n, err := strconv.Atoi(v)
				if err != nil {
					d.Fatalf(t, "%s=%s: %v", a.Key, v, err)
				}
				if a.Key == "from" {
					from = append(from, NodeID(n))
				} else {
					to = append(to, NodeID(n))
				}
			}
		case "type":
			for _, v := range a.Vals {
				if !slices.Contains(msgTypeNames[1:], v) {
					d.Fatalf(t, "no message type %q", v)
				}
			}
			types = a.Vals
		case "quiet":
		default:
			d.Fatalf(t, "%s: unknown argument %q", d.Cmd, a.Key)
		}
	}
	return func(m Message) bool {
		return (from == nil || slices.Contains(from, m.From)) &&
			(to == nil || slices.Contains(to, m.To)) &&
			(types == nil || slices.Contains(types, m.Type.String()))
	}
}

func fmtStatus(nd *netNode) string {
	c := nd.core
	if c == nil {
		return fmt.Sprintf("n%d: down", nd.id)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "n%d: %s", nd.id, c.role)
	switch c.role {
	case master:
		lease := "expired"
		if c.IsMaster() {
			lease = fmt.Sprintf("until %d", c.LeaseExpiry())
		}
		fmt.Fprintf(&b, " b=%s serving=%v lease %s", c.ballot, c.soft.Serving, lease)
	case candidate:
		fmt.Fprintf(&b, " b=%s", c.ballot)
	default:
		fmt.Fprintf(&b, " (%s)", fmtSoft(c.soft))
	}
	fmt.Fprintf(&b, " promised=%s committed=%d applied=%d now=%d", c.hs.Promised, c.hs.Committed, c.applied, c.now)
	return b.String()
}
