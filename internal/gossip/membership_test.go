package gossip

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

func testLabel() string { return fmt.Sprintf("paxlock-test-%x", rand.Uint64()) }

func clientAddr(id uint32) string { return fmt.Sprintf("127.0.0.1:%d", 17100+id) }
func peerAddr(id uint32) string   { return fmt.Sprintf("127.0.0.1:%d", 17200+id) }

type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) has(kind EventKind, id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if e.Kind == kind && e.Member.ID == id {
			return true
		}
	}
	return false
}

type testMember struct {
	*Membership
	events *eventLog
}

func startMember(t *testing.T, id uint32, label string, seeds []string) testMember {
	t.Helper()
	tm := testMember{events: &eventLog{}}
	m, err := NewMembership(MembershipConfig{
		NodeID: id,
		Bind:   "127.0.0.1:0",
		Seeds:  seeds,
		Label:  label,
		Logger: testutil.FailureLogger(t).With("member", id),
		Timing: FastTiming(),
		Meta: func() NodeMeta {
			return NodeMeta{ClientAddr: clientAddr(id), PeerAddr: peerAddr(id)}
		},
		OnEvent: func(e Event) {
			tm.events.add(e)
			// Calling Members from OnEvent must be safe (it would
			// deadlock if it reached memberlist under its node lock).
			_ = tm.Membership.Members()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tm.Membership = m
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	return tm
}

// memberByID returns the member with the given id in m's list.
func memberByID(m *Membership, id uint32) (Member, bool) {
	for _, mb := range m.Members() {
		if mb.ID == id {
			return mb, true
		}
	}
	return Member{}, false
}

func describe(m *Membership) string {
	var b strings.Builder
	for _, mb := range m.Members() {
		fmt.Fprintf(&b, "[%d %s %s %v] ", mb.ID, mb.Name, mb.State, mb.Groups)
	}
	return b.String()
}

// waitLive waits until every observer lists exactly the ids as live, with
// their configured addresses.
func waitLive(t *testing.T, observers []testMember, ids []uint32) {
	t.Helper()
	for _, o := range observers {
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			ms := o.Members()
			got := LiveIDs(ms)
			if !slices.Equal(got, ids) {
				return false, describe(o.Membership)
			}
			for _, mb := range ms {
				if mb.State.Live() && (mb.ClientAddr != clientAddr(mb.ID) || mb.PeerAddr != peerAddr(mb.ID) || mb.Name != DefaultName(mb.ID)) {
					return false, fmt.Sprintf("bad member %+v", mb)
				}
			}
			return true, ""
		}, "node %d to see live %v", o.cfg.NodeID, ids)
	}
}

func ids(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i + 1)
	}
	return out
}

func TestMembershipCluster(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%dnodes", n), func(t *testing.T) { testMembershipCluster(t, n) })
	}
}

func testMembershipCluster(t *testing.T, n int) {
	label := testLabel()
	first := startMember(t, 1, label, nil)
	sig, cancelSig := first.Subscribe()
	defer cancelSig()
	seeds := []string{first.GossipAddr()}
	members := []testMember{first}
	for id := uint32(2); id <= uint32(n); id++ {
		m := startMember(t, id, label, seeds)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if _, err := m.Join(ctx, seeds); err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		members = append(members, m)
	}

	// Join: everyone converges on everyone, with metadata.
	waitLive(t, members, ids(n))
	select {
	case <-sig:
	default:
		t.Fatal("no change notification on node 1 after joins")
	}
	for _, m := range members {
		for _, id := range ids(n) {
			testutil.Eventually(t, 30*time.Second, func() bool {
				return m.events.has(EventJoin, id)
			}, "join event for %d at %d", id, m.cfg.NodeID)
		}
		self, ok := memberByID(m.Membership, m.cfg.NodeID)
		if !ok || !self.Local || self.GossipAddr != m.GossipAddr() {
			t.Fatalf("node %d: self entry %+v (gossip %s)", m.cfg.NodeID, self, m.GossipAddr())
		}
	}

	// Metadata updates propagate.
	groups := []GroupEpoch{{Group: 1, Epoch: 5}, {Group: 4, Epoch: 9}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := members[1].UpdateMeta(ctx, NodeMeta{ClientAddr: clientAddr(2), PeerAddr: peerAddr(2), Groups: groups}); err != nil {
		t.Fatal(err)
	}
	for _, o := range members {
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			mb, ok := memberByID(o.Membership, 2)
			return ok && slices.Equal(mb.Groups, groups) && !mb.GroupsTruncated, describe(o.Membership)
		}, "node %d to see node 2's groups", o.cfg.NodeID)
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return first.events.has(EventUpdate, 2) }, "update event at node 1")

	// Graceful leave: the last node leaves; survivors mark it left.
	last := members[n-1]
	lastID := uint32(n)
	if err := last.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := last.Stop(); err != nil {
		t.Fatal(err)
	}
	members = members[:n-1]
	for _, o := range members {
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			mb, ok := memberByID(o.Membership, lastID)
			return ok && mb.State == StateLeft, describe(o.Membership)
		}, "node %d to see node %d left", o.cfg.NodeID, lastID)
	}
	waitLive(t, members, ids(n-1))

	// Crash: the next node stops without leaving; survivors mark it dead.
	crashed := members[len(members)-1]
	crashedID := crashed.cfg.NodeID
	if err := crashed.Stop(); err != nil {
		t.Fatal(err)
	}
	members = members[:len(members)-1]
	for _, o := range members {
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			mb, ok := memberByID(o.Membership, crashedID)
			return ok && mb.State == StateDead, describe(o.Membership)
		}, "node %d to see node %d dead", o.cfg.NodeID, crashedID)
		// OnEvent runs after the table changed, on its own goroutine.
		testutil.Eventually(t, 30*time.Second, func() bool {
			return o.events.has(EventLeave, crashedID)
		}, "leave event for %d at %d", crashedID, o.cfg.NodeID)
	}
	waitLive(t, members, ids(n-2))

	// The placement hint over the survivors.
	live := LiveIDs(members[0].Members())
	if got := PreferredMaster(2, live); got != live[2%len(live)] {
		t.Fatalf("PreferredMaster(2, %v) = %d", live, got)
	}
}

func TestMembershipRestartOnNewPort(t *testing.T) {
	label := testLabel()
	a := startMember(t, 1, label, nil)
	seeds := []string{a.GossipAddr()}
	b := startMember(t, 2, label, seeds)
	c := startMember(t, 3, label, seeds)
	waitLive(t, []testMember{a, b, c}, ids(3))

	old := c.GossipAddr()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		mb, ok := memberByID(a.Membership, 3)
		return ok && mb.State == StateDead, describe(a.Membership)
	}, "node 3 dead")
	// Same name, new port: memberlist refuses it ("conflicting address")
	// unless the dead entry may be reclaimed (Timing.DeadNodeReclaim).
	c2 := startMember(t, 3, label, seeds)
	if c2.GossipAddr() == old {
		t.Logf("restarted on the same port %s", old)
	}
	waitLive(t, []testMember{a, b, c2}, ids(3))
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		mb, _ := memberByID(a.Membership, 3)
		return mb.GossipAddr == c2.GossipAddr(), describe(a.Membership)
	}, "node 1 to see node 3's new address")
}

func TestMembershipOversizeMeta(t *testing.T) {
	label := testLabel()
	a := startMember(t, 1, label, nil)
	b := startMember(t, 2, label, []string{a.GossipAddr()})
	waitLive(t, []testMember{a, b}, ids(2))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// 64 groups with large epochs and long host names do not fit 512 bytes:
	// the list is dropped and flagged.
	host := strings.Repeat("n", 150)
	meta := NodeMeta{ClientAddr: clientAddr(1), PeerAddr: host + ":7200"}
	for g := range 64 {
		meta.Groups = append(meta.Groups, GroupEpoch{Group: g, Epoch: 1<<48 + uint64(g)})
	}
	if err := a.UpdateMeta(ctx, meta); err != nil {
		t.Fatal(err)
	}
	if got := a.Meta(); !got.GroupsTruncated || got.Groups != nil {
		t.Fatalf("local meta %+v", got)
	}
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		mb, ok := memberByID(b.Membership, 1)
		return ok && mb.GroupsTruncated && len(mb.Groups) == 0 && mb.PeerAddr == host+":7200", describe(b.Membership)
	}, "node 2 to see node 1's truncated metadata")

	// Addresses too long for any encoding are refused and change nothing.
	err := a.UpdateMeta(ctx, NodeMeta{ClientAddr: strings.Repeat("x", 300)})
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("UpdateMeta with a 300-byte address: %v", err)
	}
	if got := a.Meta(); got.PeerAddr != host+":7200" {
		t.Fatalf("metadata changed after a refused update: %+v", got)
	}
}

func TestMembershipLifecycle(t *testing.T) {
	m, err := NewMembership(MembershipConfig{NodeID: 9, Bind: "127.0.0.1:0", Label: testLabel(), Logger: testutil.FailureLogger(t), Timing: FastTiming()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.UpdateMeta(ctx, NodeMeta{}); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("UpdateMeta before Start: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Name() != "paxlock-9" || !strings.HasPrefix(m.GossipAddr(), "127.0.0.1:") || strings.HasSuffix(m.GossipAddr(), ":0") {
		t.Fatalf("name %q gossip %q", m.Name(), m.GossipAddr())
	}
	if err := m.Start(ctx); err == nil {
		t.Fatal("second Start succeeded")
	}
	// Join with nobody listening gives up when ctx ends.
	jctx, jcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m.Join(jctx, []string{"127.0.0.1:1"})
	jcancel()
	if !errors.Is(err, ErrJoin) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join to nobody: %v", err)
	}
	// Alone, Leave returns at once.
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	// memberlist panics on Leave after Shutdown; Membership must not.
	if err := m.Leave(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Leave after Stop: %v", err)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	ch, cancelSub := m.Subscribe()
	defer cancelSub()
	if _, ok := <-ch; ok {
		t.Fatal("subscription after Stop is open")
	}

	for _, bad := range []MembershipConfig{
		{Bind: "127.0.0.1:0"},
		{NodeID: 1, Bind: "nope"},
		{NodeID: 1, Bind: "127.0.0.1:0", SecretKey: []byte("short")},
		{NodeID: 1, Bind: "127.0.0.1:0", Label: strings.Repeat("l", 300)},
	} {
		if _, err := NewMembership(bad); err == nil {
			t.Errorf("NewMembership(%+v) succeeded", bad)
		}
	}
}

func TestSuspectHeuristic(t *testing.T) {
	m, err := NewMembership(MembershipConfig{NodeID: 1, Bind: "127.0.0.1:0", Logger: testutil.FailureLogger(t),
		Timing: Timing{SuspectAfter: time.Second, DeadRetention: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	sig, cancel := m.Subscribe()
	defer cancel()
	now := time.Now()
	m.members["self"] = &memberRec{name: "self", local: true, state: StateAlive, aliveSince: now.Add(-time.Hour)}
	m.members["b"] = &memberRec{name: "b", meta: NodeMeta{ID: 2}, state: StateAlive, aliveSince: now.Add(-2 * time.Second)}
	m.members["c"] = &memberRec{name: "c", meta: NodeMeta{ID: 3}, state: StateAlive, aliveSince: now.Add(-2 * time.Second), lastAck: now}
	m.members["d"] = &memberRec{name: "d", meta: NodeMeta{ID: 4}, state: StateDead, since: now.Add(-2 * time.Minute)}
	m.checkSuspects()
	states := map[string]State{}
	for _, mb := range m.Members() {
		states[mb.Name] = mb.State
	}
	if states["self"] != StateAlive || states["b"] != StateSuspect || states["c"] != StateAlive {
		t.Fatalf("states %v", states)
	}
	if _, ok := states["d"]; ok {
		t.Fatal("dead member kept past DeadRetention")
	}
	select {
	case <-sig:
	default:
		t.Fatal("no notification for a suspect")
	}
	if len(m.queue) != 1 || m.queue[0].Kind != EventSuspect || m.queue[0].Member.ID != 2 {
		t.Fatalf("queue %+v", m.queue)
	}
	m.members["b"].lastAck = time.Now()
	m.checkSuspects()
	if mb, _ := memberByID(m, 2); mb.State != StateAlive {
		t.Fatalf("b after an ack: %s", mb.State)
	}
	if m.queue[len(m.queue)-1].Kind != EventRecover {
		t.Fatalf("queue %+v", m.queue)
	}
	// The default threshold covers two full probe rounds.
	m.timing.SuspectAfter = 0
	m.timing.ProbeInterval, m.timing.ProbeTimeout = time.Second, 500*time.Millisecond
	if got := m.suspectAfter(2, 0); got != 6500*time.Millisecond {
		t.Fatalf("suspectAfter(2 peers) = %v", got)
	}
}
