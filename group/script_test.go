package group

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/clock"
	"github.com/paxlock/paxlock/internal/scripttest"
	"github.com/paxlock/paxlock/paxos"
)

// TestLockScripts runs the stories in testdata/scripts: the lock service
// of a few nodes over fake consensus (fakeCluster, every proposal chosen
// as it is submitted) on a fake clock, driven one command at a time, each
// command's output compared with the script. Everything a command causes
// happens before it returns, so the output is the whole story: the
// replicated commands proposed, the answers and the pushes. Rewrite the
// expected output after a deliberate change with
//
//	go test ./group -run TestLockScripts -rewrite
//
// and read the diff: it is the change in behaviour.
//
// Commands (keys are in namespace "ns"; owners are client/id, in decimal;
// a request goes to its key's serving master unless node= names another):
//
//	init [nodes=3] [groups=15] [weight-aging=<d>] [min-ttl=<d>]
//	    [default-ttl=<d>] [max-ttl=<d>]
//	    a new cluster, lock group g mastered by node g%nodes+1
//	acquire <key> <owner> [kind=exclusive|read|write] [ttl=<d>]
//	    [wait=<d>|forever] [wait-id=<n>] [weight=<n>] [waited=<d>]
//	    [value=<v>] [downgrade] [node=<n>]
//	release <key> <owner> token=<t> [pass-on=<owner>] [ttl=<d>] [value=<v>]
//	renew <key> <owner> token=<t> [ttl=<d>]
//	cancel <key> <owner> wait-id=<n>  ends a blocking acquire's wait
//	watch <key> <owner> id=<n> [token=<t>] [wait=<d>]
//	state <key> [owner=<owner>] [token=<t>]
//	advance <d> [sorted]      moves the fake clock; what comes due happens
//	    (sorted: its lines printed in sorted order, for deadlines that
//	    fall together and come due in no specified order)
//	expire <key> [owner=<o>]  advances the clock 1ms at a time until the
//	    key (or o's hold of it) is free; prints how long that took
//	forget <client>           the client's connection closes: every node
//	    forgets it
//	where <key>               the key's lock group and who masters it
//	master <key> <node>       the node serves the key's group (0: none)
//	elect <key> <node>        the node is the group's master-elect: it won
//	    the election and does not serve yet
//	lose-lease <key>          the serving master stops serving, still
//	    naming itself master under its ballot
//	take-over <key> [stop]    another node takes the key's group over;
//	    with stop, the old master's node stops first
//
// Output lines:
//
//	nX proposes <command>     a replicated command submitted by node X
//	answer <request>: <response>
//	push cN: <message>        a push to client N's connection
//
// A response prints its status and the fields that are set: kind= only
// for a kind other than exclusive, durations in time.Duration's form.
func TestLockScripts(t *testing.T) {
	t.Parallel()
	lockCommands.Run(t, "testdata/scripts", func(*testing.T) *lockScript { return &lockScript{} })
}

// lockScript is what a script of testdata/scripts drives: its cluster,
// nil until init, and what the cluster said since the command began.
type lockScript struct {
	c     *fakeCluster
	fc    *clock.Fake
	mu    sync.Mutex
	out   strings.Builder
	conns map[uint64]*scriptConn
	reqs  map[uint64]string // what each request asked, by ReqID
	reqID uint64
}

// lockCommands are the scripts' commands (TestLockScripts lists them).
var lockCommands = scripttest.Registry[*lockScript]{
	"init":       (*lockScript).handleInit,
	"acquire":    (*lockScript).handleAcquire,
	"release":    (*lockScript).handleRelease,
	"renew":      (*lockScript).handleRenew,
	"cancel":     (*lockScript).handleCancel,
	"watch":      (*lockScript).handleWatch,
	"state":      (*lockScript).handleState,
	"advance":    (*lockScript).handleAdvance,
	"expire":     (*lockScript).handleExpire,
	"forget":     (*lockScript).handleForget,
	"where":      (*lockScript).handleWhere,
	"master":     (*lockScript).handleMaster,
	"elect":      (*lockScript).handleElect,
	"lose-lease": (*lockScript).handleLoseLease,
	"take-over":  (*lockScript).handleTakeOver,
}

// Begin implements scripttest.Env: every command but init needs the
// cluster init makes.
func (s *lockScript) Begin(t *testing.T, d *datadriven.TestData) {
	if d.Cmd != "init" && s.c == nil {
		d.Fatalf(t, "%s before init", d.Cmd)
	}
	if s.c != nil {
		s.c.t = t
	}
	s.mu.Lock()
	s.out.Reset()
	s.mu.Unlock()
}

// Output implements scripttest.Env.
func (s *lockScript) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *lockScript) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.out, format+"\n", args...)
}

// scriptConn is one client's connection: it writes what the service says
// to it into the script's output.
type scriptConn struct {
	s      *lockScript
	client uint64
}

// Respond implements Sink.
func (c *scriptConn) Respond(id uint64, r wire.Response) {
	c.s.mu.Lock()
	what := c.s.reqs[id]
	c.s.mu.Unlock()
	c.s.logf("answer %s: %s", what, fmtResponse(r))
}

// Push implements Sink.
func (c *scriptConn) Push(m wire.Message) {
	c.s.logf("push c%d: %s", c.client, fmtPush(m))
}

// conn returns client's connection.
func (s *lockScript) conn(client uint64) *scriptConn {
	if s.conns[client] == nil {
		s.conns[client] = &scriptConn{s: s, client: client}
	}
	return s.conns[client]
}

func (s *lockScript) handleInit(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "nodes", "groups", "weight-aging", "min-ttl", "default-ttl", "max-ttl")
	nodes := 3
	s.fc = newFakeClock()
	cfg := Config{Clock: s.fc}
	d.MaybeScanArgs(t, "nodes", &nodes)
	d.MaybeScanArgs(t, "groups", &cfg.Groups)
	scripttest.MaybeDuration(t, d, "weight-aging", &cfg.WeightAging)
	scripttest.MaybeDuration(t, d, "min-ttl", &cfg.MinTTL)
	scripttest.MaybeDuration(t, d, "default-ttl", &cfg.DefaultTTL)
	scripttest.MaybeDuration(t, d, "max-ttl", &cfg.MaxTTL)
	s.c = newFakeCluster(t, nodes, cfg)
	s.conns = map[uint64]*scriptConn{}
	s.reqs = map[uint64]string{}
	for _, fg := range s.c.fgs {
		fg.onSubmit = func(node paxos.NodeID, cmd []byte, err error) {
			line := fmt.Sprintf("n%d proposes %s", node, fmtCommand(cmd))
			if err != nil {
				line += fmt.Sprintf(" (fails: %v)", err)
			}
			s.logf("%s", line)
		}
	}
}

// submit sends r, for key and owner o, on o's client's connection to the
// node d names (node=), else to the key's serving master.
func (s *lockScript) submit(t *testing.T, d *datadriven.TestData, r Request) {
	r.Namespace = "ns"
	r.Hash = wire.KeyHash(r.Namespace, r.Key)
	s.reqID++
	r.ReqID = s.reqID
	r.Sink = s.conn(r.Owner.Client)
	what := d.Cmd + " " + r.Key
	if !r.Owner.IsZero() {
		what += " " + fmtOwner(r.Owner)
	}
	s.mu.Lock()
	s.reqs[r.ReqID] = what
	s.mu.Unlock()
	var node int
	if !d.MaybeScanArgs(t, "node", &node) {
		s.c.master(r.Namespace, r.Key).Submit(&r)
		return
	}
	svc := s.c.svc(paxos.NodeID(node))
	if svc == nil {
		d.Fatalf(t, "node %d is stopped", node)
	}
	svc.Submit(&r)
}

// keyOwner returns the key and owner a request command names first.
func keyOwner(t *testing.T, d *datadriven.TestData) (string, wire.Owner) {
	return scripttest.Pos(t, d, 0), parseOwner(t, d, scripttest.Pos(t, d, 1))
}

func (s *lockScript) handleAcquire(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "kind", "ttl", "wait", "wait-id", "weight", "waited", "value", "node")
	key, o := keyOwner(t, d)
	r := Request{Op: OpAcquire, Key: key, Owner: o}
	var kind, wait string
	if d.MaybeScanArgs(t, "kind", &kind) {
		r.Kind = parseKind(t, d, kind)
	}
	scripttest.MaybeDuration(t, d, "ttl", &r.TTL)
	if d.MaybeScanArgs(t, "wait", &wait) {
		r.MaxWait = -1
		if wait != "forever" {
			scripttest.MaybeDuration(t, d, "wait", &r.MaxWait)
		}
	}
	d.MaybeScanArgs(t, "wait-id", &r.WaitID)
	d.MaybeScanArgs(t, "weight", &r.Weight)
	var waited time.Duration
	scripttest.MaybeDuration(t, d, "waited", &waited)
	r.WaitedMs = uint32(waited / time.Millisecond)
	d.MaybeScanArgs(t, "value", &r.Value)
	if d.HasArg("downgrade") {
		r.Flags |= wire.FlagDowngrade
	}
	s.submit(t, d, r)
}

func (s *lockScript) handleRelease(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "token", "pass-on", "ttl", "value", "node")
	key, o := keyOwner(t, d)
	r := Request{Op: OpRelease, Key: key, Owner: o}
	d.ScanArgs(t, "token", &r.Token)
	var to string
	if d.MaybeScanArgs(t, "pass-on", &to) {
		r.PassOn = parseOwner(t, d, to)
	}
	scripttest.MaybeDuration(t, d, "ttl", &r.TTL)
	d.MaybeScanArgs(t, "value", &r.Value)
	s.submit(t, d, r)
}

func (s *lockScript) handleRenew(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "token", "ttl", "node")
	key, o := keyOwner(t, d)
	r := Request{Op: OpRenew, Key: key, Owner: o}
	d.ScanArgs(t, "token", &r.Token)
	scripttest.MaybeDuration(t, d, "ttl", &r.TTL)
	s.submit(t, d, r)
}

func (s *lockScript) handleCancel(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "wait-id", "node")
	key, o := keyOwner(t, d)
	r := Request{Op: OpCancelWait, Key: key, Owner: o}
	d.ScanArgs(t, "wait-id", &r.WaitID)
	s.submit(t, d, r)
}

func (s *lockScript) handleWatch(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "id", "token", "wait", "node")
	key, o := keyOwner(t, d)
	r := Request{Op: OpWatch, Key: key, Owner: o}
	d.ScanArgs(t, "id", &r.WatchID)
	d.MaybeScanArgs(t, "token", &r.Token)
	scripttest.MaybeDuration(t, d, "wait", &r.MaxWait)
	s.submit(t, d, r)
}

func (s *lockScript) handleState(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "owner", "token", "node")
	r := Request{Op: OpState, Key: scripttest.Pos(t, d, 0)}
	var o string
	if d.MaybeScanArgs(t, "owner", &o) {
		r.Owner = parseOwner(t, d, o)
	}
	d.MaybeScanArgs(t, "token", &r.Token)
	s.submit(t, d, r)
}

// handleAdvance moves the clock. With sorted, it prints its lines in
// sorted order: deadlines that fall together (holds a take-over gave one
// TTL) come due in no specified order.
func (s *lockScript) handleAdvance(t *testing.T, d *datadriven.TestData) {
	s.fc.Advance(scripttest.PosDuration(t, d, 0))
	if !scripttest.HasPos(d, 1) {
		return
	}
	if arg := scripttest.Pos(t, d, 1); arg != "sorted" {
		d.Fatalf(t, "advance: unknown argument %q", arg)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := strings.SplitAfter(s.out.String(), "\n")
	slices.Sort(lines)
	s.out.Reset()
	s.out.WriteString(strings.Join(lines, ""))
}

// handleExpire advances the clock until the key, or the owner's hold of
// it, is free, for at most a minute and a half.
func (s *lockScript) handleExpire(t *testing.T, d *datadriven.TestData) {
	scripttest.Known(t, d, "owner")
	key := scripttest.Pos(t, d, 0)
	var o wire.Owner
	var os string
	if d.MaybeScanArgs(t, "owner", &os) {
		o = parseOwner(t, d, os)
	}
	held := func() bool {
		st := s.c.do(newSink(), Request{Op: OpState, Key: key, Owner: o})
		return st.Status == wire.StatusSuccess && (o.IsZero() || st.Holder == o)
	}
	var took time.Duration
	for held() {
		if took >= 90*time.Second {
			d.Fatalf(t, "%s still held after %v", key, took)
		}
		s.fc.Advance(time.Millisecond)
		took += time.Millisecond
	}
	s.logf("free after %v", took)
}

func (s *lockScript) handleForget(t *testing.T, d *datadriven.TestData) {
	client := uint64(scripttest.PosInt(t, d, 0))
	for _, id := range s.c.peers {
		if svc := s.c.svc(id); svc != nil {
			svc.ForgetClient(client, s.conn(client))
		}
	}
}

// group returns the lock group of key.
func (s *lockScript) group(key string) int {
	return wire.GroupOf(wire.KeyHash("ns", key), s.c.groups)
}

func (s *lockScript) handleWhere(t *testing.T, d *datadriven.TestData) {
	key := scripttest.Pos(t, d, 0)
	g := s.group(key)
	fg := s.c.fgs[g]
	fg.mu.Lock()
	soft := fg.replicas[0].soft
	fg.mu.Unlock()
	switch {
	case soft.Master == 0:
		s.logf("%s: group %d, no master", key, g)
	case fg.replica(soft.Master).Status().Serving:
		s.logf("%s: group %d, master n%d serving", key, g, soft.Master)
	default:
		s.logf("%s: group %d, master n%d not serving", key, g, soft.Master)
	}
}

func (s *lockScript) handleMaster(t *testing.T, d *datadriven.TestData) {
	s.c.fgs[s.group(scripttest.Pos(t, d, 0))].setMaster(paxos.NodeID(scripttest.PosInt(t, d, 1)))
}

func (s *lockScript) handleElect(t *testing.T, d *datadriven.TestData) {
	s.c.fgs[s.group(scripttest.Pos(t, d, 0))].elect(paxos.NodeID(scripttest.PosInt(t, d, 1)))
}

func (s *lockScript) handleLoseLease(t *testing.T, d *datadriven.TestData) {
	key := scripttest.Pos(t, d, 0)
	node, _ := s.c.groupMaster(ID(s.group(key)))
	fg := s.c.fgs[s.group(key)]
	r := fg.replica(node)
	fg.mu.Lock()
	r.soft.Serving = false
	fg.mu.Unlock()
	r.sm.MasterChanged(r.Status())
}

func (s *lockScript) handleTakeOver(t *testing.T, d *datadriven.TestData) {
	g := s.group(scripttest.Pos(t, d, 0))
	old, _ := s.c.groupMaster(ID(g))
	to := s.c.takeOver(g, d.HasArg("stop"))
	s.logf("group %d: n%d -> n%d", g, old, to)
}

func parseOwner(t *testing.T, d *datadriven.TestData, s string) wire.Owner {
	c, id, ok := strings.Cut(s, "/")
	client, err1 := strconv.ParseUint(c, 10, 64)
	n, err2 := strconv.ParseUint(id, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		d.Fatalf(t, "%s: owner %q: want client/id", d.Cmd, s)
	}
	return wire.Owner{Client: client, ID: n}
}

func parseKind(t *testing.T, d *datadriven.TestData, s string) wire.Kind {
	for k := wire.KindExclusive; k.Valid(); k++ {
		if k.String() == s {
			return k
		}
	}
	d.Fatalf(t, "%s: no kind %q", d.Cmd, s)
	return 0
}

func fmtOwner(o wire.Owner) string { return fmt.Sprintf("%d/%d", o.Client, o.ID) }

func fmtMs(ms uint32) string { return (time.Duration(ms) * time.Millisecond).String() }

// fmtResponse prints a response's status and its fields that are set.
func fmtResponse(r wire.Response) string {
	b := []string{r.Status.String()}
	add := func(set bool, format string, args ...any) {
		if set {
			b = append(b, fmt.Sprintf(format, args...))
		}
	}
	add(r.Token != 0, "token=%d", r.Token)
	add(!r.Holder.IsZero(), "holder=%s", fmtOwner(r.Holder))
	add(r.Kind != wire.KindExclusive, "kind=%s", r.Kind)
	add(r.Readers != 0, "readers=%d", r.Readers)
	add(r.TTLLeftMs != 0, "ttl-left=%s", fmtMs(r.TTLLeftMs))
	add(r.QueueLen != 0, "queue=%d", r.QueueLen)
	add(r.RetryAfterMs != 0, "retry-after=%s", fmtMs(r.RetryAfterMs))
	add(r.Value != "", "value=%q", r.Value)
	add(r.Msg != "", "msg=%q", r.Msg)
	return strings.Join(b, " ")
}

// fmtPush prints a push: a grant's outcome, a lost hold, a watch event.
func fmtPush(m wire.Message) string {
	switch m := m.(type) {
	case *wire.Granted:
		s := fmt.Sprintf("granted %s wait-id=%d %s %s", m.Key, m.WaitID, fmtOwner(m.Owner), m.Status)
		if m.Token != 0 {
			s += fmt.Sprintf(" token=%d", m.Token)
		}
		if m.TTLMs != 0 {
			s += " ttl=" + fmtMs(m.TTLMs)
		}
		return s
	case *wire.Lost:
		return fmt.Sprintf("lost %s %s token=%d %s", m.Key, fmtOwner(m.Owner), m.Token, m.Event)
	case *wire.WatchEvent:
		s := fmt.Sprintf("watch %d %s %s", m.WatchID, m.Key, m.Event)
		if m.Token != 0 {
			s += fmt.Sprintf(" token=%d", m.Token)
		}
		if !m.Holder.IsZero() {
			s += " holder=" + fmtOwner(m.Holder)
		}
		if m.Value != "" {
			s += fmt.Sprintf(" value=%q", m.Value)
		}
		return s
	}
	return fmt.Sprintf("%T %+v", m, m)
}

var opNames = map[op]string{
	opAcquire: "acquire", opRenew: "renew", opRelease: "release", opExpire: "expire",
	opSetVersion: "set-version", opGrant: "grant", opNamespacePut: "namespace-put",
	opNamespaceDelete: "namespace-delete", opNamespaceInit: "namespace-init",
	opDowngrade: "downgrade", opMultiAcquire: "multi-acquire", opSetPermits: "set-permits",
	opUndelay: "undelay", opMemberPut: "member-put", opMemberInit: "member-init",
}

// fmtCommand prints a replicated command: its op, key and owner, and the
// fields that are set; grants as [owner kind ttl ...].
func fmtCommand(b []byte) string {
	c, err := decodeCommand(b)
	if err != nil {
		return fmt.Sprintf("undecodable command %x: %v", b, err)
	}
	ns, key := splitFull(c.key)
	if ns != "ns" {
		key = ns + "/" + key
	}
	s := fmt.Sprintf("%s %s", opNames[c.op], key)
	if !c.owner.IsZero() {
		s += " " + fmtOwner(c.owner)
	}
	if c.kind != wire.KindExclusive {
		s += " " + c.kind.String()
	}
	if c.token != 0 {
		s += fmt.Sprintf(" token=%d", c.token)
	}
	if c.ttlMs != 0 {
		s += " ttl=" + fmtMs(c.ttlMs)
	}
	if c.value != "" || c.setValue {
		s += fmt.Sprintf(" value=%q", c.value)
	}
	if c.delayMs != 0 {
		s += " delay=" + fmtMs(c.delayMs)
	}
	if len(c.grants) > 0 {
		var gs []string
		for _, g := range c.grants {
			x := fmtOwner(g.owner) + " " + g.kind.String() + " ttl=" + fmtMs(g.ttlMs)
			if g.value != "" {
				x += fmt.Sprintf(" value=%q", g.value)
			}
			gs = append(gs, x)
		}
		s += " grants=[" + strings.Join(gs, ", ") + "]"
	}
	return s
}
