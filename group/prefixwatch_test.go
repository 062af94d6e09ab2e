package group

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// doPrefix sends a prefix watch (op OpWatch) or unwatch (OpUnwatch) of
// prefix in namespace ns to the master of group g and returns the answer.
func (c *fakeCluster) doPrefix(s *testSink, op Op, ns, prefix string, id uint64, g int) wire.Response {
	c.t.Helper()
	c.reqID++
	r := &Request{Op: op, Namespace: ns, Key: prefix, WatchID: id, Flags: wire.FlagContinuous | wire.FlagPrefix, ReqID: c.reqID, Sink: s}
	_, svc := c.groupMaster(ID(g))
	svc.SubmitPrefix(r, ID(g))
	return s.response(c.t, r.ReqID)
}

// watchAllGroups registers prefix watch id with every group's master.
func (c *fakeCluster) watchAllGroups(t *testing.T, s *testSink, ns, prefix string, id uint64) {
	t.Helper()
	for g := range c.groups {
		if r := c.doPrefix(s, OpWatch, ns, prefix, id, g); r.Status != wire.StatusSuccess {
			t.Fatalf("prefix watch %q of %s on group %d: %+v", prefix, ns, g, r)
		}
	}
}

// spreadKeys returns n keys of namespace ns named prefix+i, each on its
// own group.
func spreadKeys(t *testing.T, ns, prefix string, groups, n int) []string {
	t.Helper()
	seen := map[int]bool{}
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 100000 {
			t.Fatalf("no %d groups for %s keys", n, prefix)
		}
		k := fmt.Sprintf("%s%d", prefix, i)
		if g := wire.GroupOf(wire.KeyHash(ns, k), groups); !seen[g] {
			seen[g] = true
			out = append(out, k)
		}
	}
	return out
}

// keysOf returns the keys of events.
func keysOf(evs []wire.WatchEvent) map[string][]wire.Event {
	out := map[string][]wire.Event{}
	for _, e := range evs {
		out[e.Key] = append(out[e.Key], e.Event)
	}
	return out
}

// TestPrefixWatchEvents: a prefix watch registered with every group
// hears of the acquires, releases and expiries of its namespace's keys
// with its prefix on every group, with each key named; keys outside the
// prefix and another namespace's keys (under the same prefix) are never
// reported to it; a whole-namespace watch ("") hears every key of its
// namespace only; an unwatch on one group stops that group's events.
func TestPrefixWatchEvents(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	jobs := spreadKeys(t, "ns", "job/", c.groups, 4)
	tasks := spreadKeys(t, "ns", "task/", c.groups, 2)
	otherJobs := spreadKeys(t, "other", "job/", c.groups, 2)
	ws, all, iso := newSink(), newSink(), newSink()
	c.watchAllGroups(t, ws, "ns", "job/", 1)
	c.watchAllGroups(t, all, "ns", "", 2)
	c.watchAllGroups(t, iso, "other", "job/", 3)
	holder := newSink()
	tokens := map[string]uint64{}
	acquire := func(ns, k string, ttl time.Duration) {
		t.Helper()
		r := c.do(holder, Request{Op: OpAcquire, Namespace: ns, Key: k, Owner: owner(1, 1), TTL: ttl})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s/%s: %+v", ns, k, r)
		}
		tokens[ns+"/"+k] = r.Token
	}
	for _, k := range jobs {
		acquire("ns", k, time.Hour)
	}
	for _, k := range tasks {
		acquire("ns", k, time.Hour)
	}
	for _, k := range otherJobs {
		acquire("other", k, time.Hour)
	}
	// Each acquire's answer follows its pushes: what is here is all.
	evs := ws.waitWatch(t, 1, len(jobs))
	got := keysOf(evs)
	if len(evs) != len(jobs) || len(got) != len(jobs) {
		t.Fatalf("prefix watch events %+v, want one per key of %v", evs, jobs)
	}
	for _, e := range evs {
		if e.Event != wire.EventAcquired || e.Token != tokens["ns/"+e.Key] || e.Holder != owner(1, 1) {
			t.Fatalf("prefix watch event %+v, want acquired with token %d", e, tokens["ns/"+e.Key])
		}
	}
	if n := len(all.watchEvents(2)); n != len(jobs)+len(tasks) {
		t.Fatalf("whole-namespace watch had %d events, want %d: %+v", n, len(jobs)+len(tasks), all.watchEvents(2))
	}
	for _, e := range all.watchEvents(2) {
		if !strings.HasPrefix(e.Key, "job/") && !strings.HasPrefix(e.Key, "task/") {
			t.Fatalf("whole-namespace watch heard of %q", e.Key)
		}
	}
	isoEvs := iso.watchEvents(3)
	if len(isoEvs) != len(otherJobs) {
		t.Fatalf("the other namespace's watch had %+v, want its %d keys only", isoEvs, len(otherJobs))
	}
	for _, e := range isoEvs {
		if e.Token != tokens["other/"+e.Key] {
			t.Fatalf("the other namespace's watch heard of another namespace's %q: %+v", e.Key, e)
		}
	}
	// A release, then an expiry.
	if r := c.do(holder, Request{Op: OpRelease, Key: jobs[0], Owner: owner(1, 1), Token: tokens["ns/"+jobs[0]]}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	if e := ws.waitWatch(t, 1, len(jobs)+1)[len(jobs)]; e.Key != jobs[0] || e.Event != wire.EventReleased || e.Token != tokens["ns/"+jobs[0]] {
		t.Fatalf("after a release: %+v", e)
	}
	acquire("ns", jobs[0], 2*time.Second)
	ws.waitWatch(t, 1, len(jobs)+2)
	advanceUntil(t, fc, 10*time.Millisecond, "expiry", freed(c, jobs[0]))
	if e := ws.waitWatch(t, 1, len(jobs)+3)[len(jobs)+2]; e.Key != jobs[0] || e.Event != wire.EventExpired {
		t.Fatalf("after an expiry: %+v", e)
	}
	// Unwatch on jobs[1]'s group: its changes are no longer reported,
	// the other groups' still are.
	g1 := c.groupOf(jobs[1])
	if r := c.doPrefix(ws, OpUnwatch, "ns", "job/", 1, g1); r.Status != wire.StatusSuccess {
		t.Fatalf("unwatch: %+v", r)
	}
	before := len(ws.watchEvents(1))
	if r := c.do(holder, Request{Op: OpRelease, Key: jobs[1], Owner: owner(1, 1), Token: tokens["ns/"+jobs[1]]}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	if n := len(ws.watchEvents(1)); n != before {
		t.Fatalf("an unwatched group's release was reported: %+v", ws.watchEvents(1)[before:])
	}
	if r := c.do(holder, Request{Op: OpRelease, Key: jobs[2], Owner: owner(1, 1), Token: tokens["ns/"+jobs[2]]}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	if e := ws.waitWatch(t, 1, before+1)[before]; e.Key != jobs[2] || e.Event != wire.EventReleased {
		t.Fatalf("a watched group's release after another group's unwatch: %+v", e)
	}
}

// TestPrefixWatchMovedOnStepDown: a master that loses its group tells
// its prefix watches EventMoved with their ids, keeps no place for them,
// and the next master serves a prefix watch registered again there.
func TestPrefixWatchMovedOnStepDown(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	k := spreadKeys(t, "ns", "job/", c.groups, 1)[0]
	g := c.groupOf(k)
	_, old := c.groupMaster(ID(g))
	ws := newSink()
	if r := c.doPrefix(ws, OpWatch, "ns", "job/", 7, g); r.Status != wire.StatusSuccess {
		t.Fatalf("prefix watch: %+v", r)
	}
	c.takeOver(g, false)
	if e := ws.waitWatch(t, 7, 1)[0]; e.Event != wire.EventMoved || e.Key != "job/" {
		t.Fatalf("after the master stepped down: %+v, want EventMoved", e)
	}
	ws.wait(t, "the old master's prefix watches and places to go", func() bool {
		old.use.mu.Lock()
		defer old.use.mu.Unlock()
		return old.Group(ID(g)).prefix.load() == nil && len(old.use.conns) == 0 && len(old.use.nss) == 0
	})
	if n := len(ws.watchEvents(7)); n != 1 {
		t.Fatalf("%d events, want one EventMoved from all the workers together", n)
	}
	if r := c.doPrefix(ws, OpWatch, "ns", "job/", 7, g); r.Status != wire.StatusSuccess {
		t.Fatalf("prefix watch at the new master: %+v", r)
	}
	ra := c.do(newSink(), Request{Op: OpAcquire, Key: k, Owner: owner(1, 1), TTL: 5 * time.Second})
	if ra.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", ra)
	}
	if e := ws.waitWatch(t, 7, 2)[1]; e.Event != wire.EventAcquired || e.Key != k || e.Token != ra.Token {
		t.Fatalf("at the new master: %+v", e)
	}
}

// TestPrefixWatchBound: a connection keeps at most MaxConnPrefixWatches
// prefix watches on a node and a namespace MaxNamespacePrefixWatches;
// one more is answered OVERLOADED with a message naming the bound, and
// nothing is set for it; a watch registered again takes no new place;
// an unwatch and a forgotten connection free theirs; a group out of
// range is answered BAD_REQUEST.
func TestPrefixWatchBound(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{MaxConnPrefixWatches: 2, MaxNamespacePrefixWatches: 3})
	var gs []int // groups mastered by node 1
	for g := range c.groups {
		if m, _ := c.groupMaster(ID(g)); m == paxos.NodeID(1) {
			gs = append(gs, g)
		}
	}
	if len(gs) < 2 {
		t.Fatalf("node 1 masters groups %v", gs)
	}
	a, b := newSink(), newSink()
	for i, g := range []int{gs[0], gs[1]} {
		if r := c.doPrefix(a, OpWatch, "ns", "p", uint64(i+1), g); r.Status != wire.StatusSuccess {
			t.Fatalf("prefix watch %d: %+v", i, r)
		}
	}
	r := c.doPrefix(a, OpWatch, "ns", "p", 3, gs[0])
	wantOverloaded(t, "a third prefix watch on the connection", r)
	if !strings.Contains(r.Msg, "too many prefix watches on this connection (2)") {
		t.Fatalf("refusal message %q", r.Msg)
	}
	if r := c.doPrefix(a, OpWatch, "ns", "p", 1, gs[0]); r.Status != wire.StatusSuccess {
		t.Fatalf("a prefix watch registered again: %+v", r)
	}
	if r := c.doPrefix(b, OpWatch, "ns", "p", 1, gs[0]); r.Status != wire.StatusSuccess {
		t.Fatalf("another connection's prefix watch: %+v", r)
	}
	r = c.doPrefix(b, OpWatch, "ns", "p", 2, gs[0])
	wantOverloaded(t, "a fourth prefix watch in the namespace", r)
	if !strings.Contains(r.Msg, "too many prefix watches in this namespace on this node (3)") {
		t.Fatalf("refusal message %q", r.Msg)
	}
	if r := c.doPrefix(b, OpWatch, "other", "p", 1, gs[0]); r.Status != wire.StatusSuccess {
		t.Fatalf("another namespace's prefix watch: %+v", r)
	}
	// The refused watch was not set: a key of its group is not reported.
	k := spreadKeys(t, "ns", "p", c.groups, c.groups)
	for _, key := range k {
		if c.groupOf(key) == gs[0] {
			if r := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour}); r.Status != wire.StatusSuccess {
				t.Fatalf("acquire: %+v", r)
			}
		}
	}
	if n := len(b.watchEvents(2)); n != 0 {
		t.Fatalf("a refused prefix watch had %d events", n)
	}
	if n := len(a.watchEvents(3)); n != 0 {
		t.Fatalf("a refused prefix watch had %d events", n)
	}
	if n := len(b.watchEvents(1)); n != 1 {
		t.Fatalf("a set prefix watch had %d events, want 1", n)
	}
	// An unwatch frees a place in the namespace; a forgotten connection
	// frees its own.
	if r := c.doPrefix(a, OpUnwatch, "ns", "p", 2, gs[1]); r.Status != wire.StatusSuccess {
		t.Fatalf("unwatch: %+v", r)
	}
	d := newSink()
	if r := c.doPrefix(d, OpWatch, "ns", "p", 1, gs[1]); r.Status != wire.StatusSuccess {
		t.Fatalf("a prefix watch in the namespace after an unwatch: %+v", r)
	}
	svc := c.svc(1)
	for _, s := range []*testSink{a, b, d} {
		svc.ForgetClient(0, s)
	}
	a.wait(t, "the forgotten connections' places to go", func() bool {
		svc.use.mu.Lock()
		defer svc.use.mu.Unlock()
		return len(svc.use.conns) == 0
	})
	// A group out of range is refused, not served.
	bad := newSink()
	c.reqID++
	svc.SubmitPrefix(&Request{Op: OpWatch, Namespace: "ns", WatchID: 1, Flags: wire.FlagPrefix, ReqID: c.reqID, Sink: bad}, ID(c.groups))
	if r := bad.response(t, c.reqID); r.Status != wire.StatusBadRequest {
		t.Fatalf("prefix watch on group %d of %d: %+v, want BAD_REQUEST", c.groups, c.groups, r)
	}
}

// TestNotifyPrefixAllocs: with no prefix watch on the group, or none in
// the key's namespace, a change costs notifyPrefix no allocation.
func TestNotifyPrefixAllocs(t *testing.T) {
	w := &worker{g: &Group{}}
	key := fullKey("ns", "job/1")
	notify := func() { w.notifyPrefix(key, wire.EventAcquired, 5, owner(1, 1), "v") }
	if n := testing.AllocsPerRun(1000, notify); n != 0 {
		t.Fatalf("notifyPrefix without prefix watches: %v allocations", n)
	}
	sink := newSink()
	w.g.prefix.update(func(s prefixSet) []*prefixWatcher {
		s["other"] = []*prefixWatcher{{id: 1, ns: "other", prefix: "", sink: sink}}
		return nil
	})
	if n := testing.AllocsPerRun(1000, notify); n != 0 {
		t.Fatalf("notifyPrefix with prefix watches of another namespace only: %v allocations", n)
	}
	if n := len(sink.pushes); n != 0 {
		t.Fatalf("another namespace's prefix watch had %d pushes", n)
	}
}

// BenchmarkNotifyPrefix measures a change's cost to notifyPrefix without
// prefix watches and with 16 in the key's namespace, none matching.
func BenchmarkNotifyPrefix(b *testing.B) {
	key := fullKey("ns", "job/1")
	for _, n := range []int{0, 16} {
		b.Run(fmt.Sprintf("watches=%d", n), func(b *testing.B) {
			w := &worker{g: &Group{}}
			if n > 0 {
				w.g.prefix.update(func(s prefixSet) []*prefixWatcher {
					for i := range n {
						s["ns"] = append(s["ns"], &prefixWatcher{id: uint64(i + 1), ns: "ns", prefix: fmt.Sprintf("task/%d/", i), sink: newSink()})
					}
					return nil
				})
			}
			b.ReportAllocs()
			for b.Loop() {
				w.notifyPrefix(key, wire.EventAcquired, 5, owner(1, 1), "v")
			}
		})
	}
}
