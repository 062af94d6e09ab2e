package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestMoveFollowed: a hold whose namespace moves to another cluster. A
// renewal answered MOVING is retried within its context and, refused
// throughout, does not extend the hold's validity; once the old cluster
// answers MOVED with the new cluster's addresses (the registry, here the
// old cluster's node, still naming the old cluster), the client installs
// the new cluster's view whatever its version, renews there on the copied
// record with the same token, and a blocked acquire queued at the old
// cluster is sent again at the new one.
func TestMoveFollowed(t *testing.T) {
	t.Parallel()
	src := newFakeCluster(t, 1)
	dst := newFakeCluster(t, 2)
	src.setMaster(src.nodes[0]) // view version 2 at the source, 1 at the target
	s, d := src.nodes[0], dst.nodes[0]
	c := newTestClient(t, testConfig(s.addr))
	ctx := tctx(t)
	m := c.Mutex("k", TTL(10*time.Second))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := m.Token()
	// A waiter on another key, queued at the source.
	other := c.Mutex("busy")
	s.set(func(n *fakeNode) {
		n.locks["busy"] = &flock{kind: wire.KindExclusive, holders: map[wire.Owner]*fhold{{Client: 99, ID: 1}: {token: 1, ttlMs: 60000}}}
	})
	locked := make(chan error, 1)
	go func() { locked <- other.Lock(ctx) }()
	s.waitFor(t, "the waiter queued", func(n *fakeNode) bool { return len(n.waiters["busy"]) == 1 })

	// The move begins: MOVING.
	s.set(func(n *fakeNode) { n.moving = true })
	before := m.ValidUntil()
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := m.Renew(rctx, 0)
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("renew while MOVING: %v, want the context's deadline", err)
	}
	if !m.ValidUntil().Equal(before) || !m.Held() {
		t.Fatalf("a renewal refused MOVING changed validity: %v -> %v (held %v)", before, m.ValidUntil(), m.Held())
	}

	// The copy: the target holds k with the same owner and token, and the
	// busy key for its other holder.
	d.set(func(n *fakeNode) {
		n.locks["k"] = &flock{kind: wire.KindExclusive, holders: map[wire.Owner]*fhold{m.Owner(): {token: tok, ttlMs: 10000}}}
		n.locks["busy"] = &flock{kind: wire.KindExclusive, holders: map[wire.Owner]*fhold{{Client: 99, ID: 1}: {token: 1, ttlMs: 60000}}}
	})
	// The flip and the drop: MOVED with the target's addresses.
	s.set(func(n *fakeNode) { n.moving, n.movedTo = false, strings.Join([]string{d.addr, dst.nodes[1].addr}, ",") })
	if err := m.Renew(ctx, 0); err != nil {
		t.Fatalf("renew after the move: %v", err)
	}
	if m.Token() != tok || !m.ValidUntil().After(before) {
		t.Fatalf("after the move: token %d (want %d), valid until %v (was %v)", m.Token(), tok, m.ValidUntil(), before)
	}
	d.waitFor(t, "the renewal at the target", func(n *fakeNode) bool { return len(n.renewedAt) > 0 })
	if a, ok := c.masterAddr(wire.KeyHash(fakeNS, "k")); !ok || a != d.addr {
		t.Fatalf("master of k after the move: %q, want the target's %q", a, d.addr)
	}
	// The blocked acquire is queued at the target now; it is granted there.
	d.waitFor(t, "the waiter re-sent to the target", func(n *fakeNode) bool { return len(n.waiters["busy"]) == 1 })
	d.set(func(n *fakeNode) { n.dropHolderLocked("busy", wire.Owner{Client: 99, ID: 1}, wire.EventReleased) })
	if err := <-locked; err != nil {
		t.Fatalf("the blocked acquire: %v", err)
	}
	// The old cluster's views are ignored from now on.
	src.setMaster(src.nodes[0])
	if c.leftCluster(src.view()) != true {
		t.Fatal("a view of the old cluster is not recognised")
	}
	if a, _ := c.masterAddr(wire.KeyHash(fakeNS, "k")); a != d.addr {
		t.Fatalf("an old cluster's view was installed: master %q", a)
	}
}
