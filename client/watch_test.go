package client

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// moveWatches drops key's watches, pushing each EventMoved, as a master
// that steps down while its clients' connections stay up does; the
// connections stay open.
func (n *fakeNode) moveWatches(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.watches[key] {
		w.conn.Send(wire.TypeWatchEvent, 0, &wire.WatchEvent{WatchID: w.id, Key: key, Event: wire.EventMoved})
	}
	delete(n.watches, key)
}

// TestWatchMoved: a watch whose master pushes EventMoved is registered
// again over the same connection (no reconnect, no new view), from the
// last token reported, and keeps reporting; the moved event itself never
// reaches the user.
func TestWatchMoved(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	w, err := c.Watch(ctx, "k", 0, Continuous())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	next := func() Event {
		t.Helper()
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("events closed: %v", w.Err())
			}
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
		}
		return Event{}
	}
	m := c.Mutex("k")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != EventAcquired || ev.Token != m.Token() {
		t.Fatalf("event %+v", ev)
	}
	first := m.Token()
	conns, watches := n.conns(), n.count(wire.TypeWatch)
	n.moveWatches("k")
	n.waitFor(t, "the watch registered again", func(n *fakeNode) bool {
		return n.count(wire.TypeWatch) > watches && len(n.watches["k"]) == 1
	})
	if got := n.conns(); got != conns {
		t.Fatalf("%d connections after EventMoved, want %d (no reconnect)", got, conns)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first event after the move is the release: the moved event was
	// not delivered, and the acquire already reported is not again.
	if ev := next(); ev.Type != EventReleased || ev.Token != first {
		t.Fatalf("first event after EventMoved %+v, want released of token %d", ev, first)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != EventAcquired || ev.Token != m.Token() {
		t.Fatalf("event after the re-registration %+v", ev)
	}
}

// movePrefix drops the prefix watches registered with group g, pushing
// each EventMoved, as a master that steps down does.
func (n *fakeNode) movePrefix(g uint32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, ws := range n.watches {
		if !strings.HasPrefix(k, "\x00") {
			continue
		}
		var keep []*fwatch
		for _, w := range ws {
			if w.group != g {
				keep = append(keep, w)
				continue
			}
			w.conn.Send(wire.TypeWatchEvent, 0, &wire.WatchEvent{WatchID: w.id, Key: w.prefix, Event: wire.EventMoved})
		}
		n.watches[k] = keep
	}
}

// prefixWatches counts the prefix watches a fake node keeps, by group.
func (n *fakeNode) prefixWatches() map[uint32]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.prefixWatchesLocked()
}

// prefixWatchesLocked is prefixWatches with n.mu held.
func (n *fakeNode) prefixWatchesLocked() map[uint32]int {
	out := map[uint32]int{}
	for k, ws := range n.watches {
		if strings.HasPrefix(k, "\x00") {
			for _, w := range ws {
				out[w.group]++
			}
		}
	}
	return out
}

// TestWatchPrefix: WatchPrefix registers with every group (FlagPrefix,
// the group named), delivers the events of the keys under the prefix
// with their keys and none of the others, registers a group's part again
// when its master pushes EventMoved and tells the user so (EventMoved,
// Key the prefix), and when ctx ends unwatches everywhere and closes the
// channel.
func TestWatchPrefix(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs, err := c.WatchPrefix(wctx, "job/")
	if err != nil {
		t.Fatal(err)
	}
	if got := n.prefixWatches(); len(got) != fc.groups {
		t.Fatalf("prefix watches by group %v, want one on each of %d groups", got, fc.groups)
	}
	all, err := c.WatchPrefix(wctx, "") // the whole namespace
	if err != nil {
		t.Fatal(err)
	}
	next := func() Event {
		t.Helper()
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("events closed")
			}
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
		}
		return Event{}
	}
	// A key outside the prefix first, then one under it: the fake pushes
	// in order over the one connection, so the first event is the second.
	other := c.Mutex("task/1")
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	a := c.Mutex("job/a")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Key != "job/a" || ev.Type != EventAcquired || ev.Token != a.Token() {
		t.Fatalf("first event %+v, want job/a acquired with token %d", ev, a.Token())
	}
	for _, want := range []string{"task/1", "job/a"} {
		select {
		case ev := <-all:
			if ev.Key != want || ev.Type != EventAcquired {
				t.Fatalf("whole-namespace watch: %+v, want %s acquired", ev, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("whole-namespace watch: no event for %s", want)
		}
	}
	// job/a's group's master steps down: the part is registered again
	// and the user hears EventMoved, then the next change.
	g := uint32(wire.GroupOf(wire.KeyHash(fakeNS, "job/a"), fc.groups))
	watches := n.count(wire.TypeWatch)
	n.movePrefix(g)
	if ev := next(); ev.Type != EventMoved || ev.Key != "job/" {
		t.Fatalf("after the group's master moved: %+v, want EventMoved", ev)
	}
	// Both prefix watches' parts on the group are registered again.
	n.waitFor(t, "two registrations after EventMoved", func(n *fakeNode) bool { return n.count(wire.TypeWatch) == watches+2 })
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Key != "job/a" || ev.Type != EventReleased {
		t.Fatalf("after the re-registration: %+v, want job/a released", ev)
	}
	cancel()
	for ev := range evs {
		if ev.Key != "job/a" && ev.Key != "job/" {
			t.Fatalf("event %+v after the end", ev)
		}
	}
	n.waitFor(t, "every group's part unwatched", func(n *fakeNode) bool { return len(n.prefixWatchesLocked()) == 0 })
}

// TestPrefixWatchOverflow: a reader too slow for the prefix watch's
// buffer gets every event queued before it filled, then EventMoved
// before any later event, so that a List on reading it includes every
// change it was not given; an overflow seen again after that EventMoved
// gets one of its own.
func TestPrefixWatchOverflow(t *testing.T) {
	t.Parallel()
	pw := &prefixWatch{prefix: "job/", ch: make(chan Event, prefixWatchBuffer)}
	ev := func(i int) Event { return Event{Key: fmt.Sprintf("job/%d", i), Type: EventAcquired, Token: uint64(i)} }
	for i := range prefixWatchBuffer + 10 {
		pw.push(ev(i))
	}
	for i := range prefixWatchBuffer {
		if got := <-pw.ch; got != ev(i) {
			t.Fatalf("event %d: %+v, want %+v (the events queued before the buffer filled, in order)", i, got, ev(i))
		}
	}
	pw.push(ev(1000))
	if got := <-pw.ch; got.Type != EventMoved || got.Key != "job/" {
		t.Fatalf("first event after the overflow: %+v, want EventMoved for job/", got)
	}
	if got := <-pw.ch; got != ev(1000) {
		t.Fatalf("after EventMoved: %+v, want %+v", got, ev(1000))
	}
	// Full again, with one slot freed: EventMoved takes it and the event
	// that found it is covered by a second EventMoved.
	for i := range prefixWatchBuffer + 1 {
		pw.push(ev(2000 + i))
	}
	<-pw.ch
	pw.push(ev(3000))
	pw.push(ev(3001)) // no room: dropped, missed again
	var last []Event
	for len(pw.ch) > 0 {
		last = append(last, <-pw.ch)
	}
	if n := len(last); n < 1 || last[n-1].Type != EventMoved {
		t.Fatalf("after the second overflow the buffer ends with %+v, want EventMoved", last[max(0, n-1):])
	}
	pw.push(ev(4000))
	if got := <-pw.ch; got.Type != EventMoved {
		t.Fatalf("after the dropped %+v: %+v, want EventMoved", ev(3000), got)
	}
	if got := <-pw.ch; got != ev(4000) {
		t.Fatalf("after EventMoved: %+v, want %+v", got, ev(4000))
	}
	pw.end()
	pw.push(ev(5000)) // after the end: nothing, no panic
}
