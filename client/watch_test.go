package client

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
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
