package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// wantOverloaded fails unless r is OVERLOADED with a RetryAfterMs.
func wantOverloaded(t *testing.T, what string, r wire.Response) {
	t.Helper()
	if r.Status != wire.StatusOverloaded || r.RetryAfterMs == 0 {
		t.Fatalf("%s: %+v, want OVERLOADED with RetryAfterMs", what, r)
	}
}

// TestMaxWaitersPerKey: a key queues at most MaxWaiters blocked acquires;
// one more is answered OVERLOADED with RetryAfterMs (nothing queued for
// it), a try-lock is still answered LOCK_OCCUPIED, and once a waiter
// leaves the queue a new one is admitted again.
func TestMaxWaitersPerKey(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{MaxWaiters: 2})
	const key = "crowded"
	s := newSink()
	if r := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 10 * time.Second}); r.Status != wire.StatusSuccess {
		t.Fatalf("holder: %+v", r)
	}
	wait := func(o wire.Owner, id uint64) wire.Response {
		return c.do(s, Request{Op: OpAcquire, Key: key, Owner: o, MaxWait: -1, WaitID: id, TTL: 10 * time.Second})
	}
	for i := uint64(2); i <= 3; i++ {
		if r := wait(owner(i, 1), i); r.Status != wire.StatusLockWait {
			t.Fatalf("waiter %d: %+v", i, r)
		}
	}
	wantOverloaded(t, "a third waiter", wait(owner(4, 1), 4))
	if r := c.state(key); r.QueueLen != 2 {
		t.Fatalf("queue of %d after the refusal, want 2", r.QueueLen)
	}
	if r := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(4, 1), TTL: 10 * time.Second}); r.Status != wire.StatusLockOccupied {
		t.Fatalf("try-lock on the full queue: %+v, want LOCK_OCCUPIED", r)
	}
	// A waiter re-sent (same owner and wait id) is the same wait, not a
	// new one: it is admitted although the queue is full.
	if r := wait(owner(2, 1), 2); r.Status != wire.StatusLockWait {
		t.Fatalf("re-sent waiter: %+v", r)
	}
	if r := c.do(s, Request{Op: OpCancelWait, Key: key, Owner: owner(3, 1), WaitID: 3}); r.Status != wire.StatusSuccess {
		t.Fatalf("cancel: %+v", r)
	}
	if r := wait(owner(4, 1), 4); r.Status != wire.StatusLockWait {
		t.Fatalf("a waiter after one left: %+v", r)
	}
}

// keysOn returns n keys of namespace "ns", each in a lock group of its
// own that node masters (the bounds are per node and span its groups).
func keysOn(t *testing.T, c *fakeCluster, node paxos.NodeID, n int) []string {
	t.Helper()
	var keys []string
	groups := map[int]bool{}
	for i := 0; len(keys) < n; i++ {
		if i > 100000 {
			t.Fatalf("no %d groups mastered by node %d", n, node)
		}
		k := fmt.Sprintf("k%d", i)
		g := wire.GroupOf(wire.KeyHash("ns", k), c.groups)
		if m, _ := c.groupMaster(ID(g)); m == node && !groups[g] {
			groups[g] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// groupOf returns the lock group of key in namespace "ns".
func (c *fakeCluster) groupOf(key string) int { return wire.GroupOf(wire.KeyHash("ns", key), c.groups) }

// TestConnWaitBound: one connection keeps at most MaxConnWaits blocked
// acquires on a node, across keys and groups: one more is answered
// OVERLOADED with RetryAfterMs and is not queued; another connection is
// not affected; a wait that ends (granted, cancelled, timed out, its
// connection forgotten, its master's mastership lost) frees its place.
func TestConnWaitBound(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc, MaxConnWaits: 3})
	keys := keysOn(t, c, 1, 5)
	holder, a, b := newSink(), newSink(), newSink()
	for _, k := range keys {
		if r := c.do(holder, Request{Op: OpAcquire, Key: k, Owner: owner(1, 1), TTL: time.Hour}); r.Status != wire.StatusSuccess {
			t.Fatalf("hold %s: %+v", k, r)
		}
	}
	wait := func(s *testSink, k string, o wire.Owner, id uint64, maxWait time.Duration) wire.Response {
		return c.do(s, Request{Op: OpAcquire, Key: k, Owner: o, MaxWait: maxWait, WaitID: id, TTL: time.Hour})
	}
	for i, k := range keys[:3] {
		if r := wait(a, k, owner(2, 1), uint64(i+1), -1); r.Status != wire.StatusLockWait {
			t.Fatalf("wait %d: %+v", i, r)
		}
	}
	wantOverloaded(t, "a fourth wait on the connection", wait(a, keys[3], owner(2, 1), 4, -1))
	if r := c.state(keys[3]); r.QueueLen != 0 {
		t.Fatalf("the refused wait was queued: %+v", r)
	}
	if r := wait(b, keys[3], owner(3, 1), 1, -1); r.Status != wire.StatusLockWait {
		t.Fatalf("another connection's wait: %+v", r)
	}
	// A re-sent wait (same owner and wait id) is the same wait.
	if r := wait(a, keys[0], owner(2, 1), 1, -1); r.Status != wire.StatusLockWait {
		t.Fatalf("a re-sent wait: %+v", r)
	}
	// A grant frees a place.
	if r := c.do(holder, Request{Op: OpRelease, Key: keys[0], Owner: owner(1, 1), Token: c.state(keys[0]).Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	a.granted(t, 1)
	if r := wait(a, keys[3], owner(2, 1), 4, -1); r.Status != wire.StatusLockWait {
		t.Fatalf("a wait after one was granted: %+v", r)
	}
	wantOverloaded(t, "a wait over the bound again", wait(a, keys[4], owner(2, 1), 5, -1))
	// A cancel frees a place.
	if r := c.do(a, Request{Op: OpCancelWait, Key: keys[1], Owner: owner(2, 1), WaitID: 2}); r.Status != wire.StatusSuccess {
		t.Fatalf("cancel: %+v", r)
	}
	if r := wait(a, keys[4], owner(2, 1), 5, time.Second); r.Status != wire.StatusLockWait {
		t.Fatalf("a wait after a cancel: %+v", r)
	}
	// A timeout frees a place.
	advanceUntil(t, fc, 100*time.Millisecond, "the wait's timeout", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, m := range a.pushes {
			if g, ok := m.(*wire.Granted); ok && g.WaitID == 5 {
				return g.Status == wire.StatusTimeout
			}
		}
		return false
	})
	if r := wait(a, keys[1], owner(2, 1), 6, -1); r.Status != wire.StatusLockWait {
		t.Fatalf("a wait after a timeout: %+v", r)
	}
	wantOverloaded(t, "a wait over the bound once more", wait(a, keys[4], owner(2, 1), 7, -1))
	// A forgotten connection frees all of its places.
	for _, svc := range c.svcs {
		svc.ForgetClient(owner(2, 1).Client, a)
	}
	a2 := newSink()
	for i, k := range keys[1:4] {
		if r := wait(a2, k, owner(2, 1), uint64(10+i), -1); r.Status != wire.StatusLockWait {
			t.Fatalf("wait %d after the connection was forgotten: %+v", i, r)
		}
	}
	wantOverloaded(t, "a wait over the bound after the connection was forgotten", wait(a2, keys[4], owner(2, 1), 20, -1))
	// A node that stops mastering a group lets go of its waits.
	c.takeOver(c.groupOf(keys[1]), false)
	if r := wait(a2, keys[4], owner(2, 1), 20, -1); r.Status != wire.StatusLockWait {
		t.Fatalf("a wait after a group moved away: %+v", r)
	}
}

// TestConnWatchBound: one connection keeps at most MaxConnWatches
// watches on a node, across keys and groups; one more is OVERLOADED with
// RetryAfterMs and never hears of the key (a repeated watch id counts
// again); a watch that ends (a one-shot watch's event, Unwatch, its
// MaxWait, its master's mastership lost) frees its place.
func TestConnWatchBound(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc, MaxConnWatches: 2})
	k := keysOn(t, c, 1, 5)
	ws, other, holder := newSink(), newSink(), newSink()
	watch := func(s *testSink, key string, id uint64, flags wire.Flags, maxWait time.Duration) wire.Response {
		return c.do(s, watchReq(key, id, 0, flags, maxWait))
	}
	acquire := func(key string) {
		t.Helper()
		if r := c.do(holder, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour}); r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %+v", key, r)
		}
	}
	if r := watch(ws, k[0], 1, wire.FlagContinuous, 0); r.Status != wire.StatusSuccess {
		t.Fatalf("watch 1: %+v", r)
	}
	if r := watch(ws, k[1], 2, 0, 0); r.Status != wire.StatusSuccess {
		t.Fatalf("watch 2: %+v", r)
	}
	wantOverloaded(t, "a third watch", watch(ws, k[2], 3, wire.FlagContinuous, 0))
	wantOverloaded(t, "the first watch again", watch(ws, k[0], 1, wire.FlagContinuous, 0))
	if r := watch(other, k[2], 1, 0, 0); r.Status != wire.StatusSuccess {
		t.Fatalf("another connection's watch: %+v", r)
	}
	acquire(k[2])
	other.waitWatch(t, 1, 1)
	if n := len(ws.watchEvents(3)); n != 0 {
		t.Fatalf("the refused watch heard %d events", n)
	}
	// k[1]'s one-shot watch ends with its event: a place is free.
	acquire(k[1])
	ws.waitWatch(t, 2, 1)
	if r := watch(ws, k[3], 3, 0, time.Second); r.Status != wire.StatusSuccess {
		t.Fatalf("a watch after a one-shot one fired: %+v", r)
	}
	wantOverloaded(t, "a watch over the bound again", watch(ws, k[4], 4, 0, 0))
	// Unwatch frees a place.
	if r := c.do(ws, Request{Op: OpUnwatch, Key: k[0], WatchID: 1}); r.Status != wire.StatusSuccess {
		t.Fatalf("unwatch: %+v", r)
	}
	if r := watch(ws, k[0], 4, wire.FlagContinuous, 0); r.Status != wire.StatusSuccess {
		t.Fatalf("a watch after an unwatch: %+v", r)
	}
	wantOverloaded(t, "a watch over the bound after the unwatch", watch(ws, k[4], 5, 0, 0))
	// k[3]'s watch times out: a place is free.
	advanceUntil(t, fc, 100*time.Millisecond, "the watch's timeout", func() bool {
		for _, e := range ws.watchEvents(3) {
			if e.Event == wire.EventTimeout {
				return true
			}
		}
		return false
	})
	if r := watch(ws, k[3], 5, wire.FlagContinuous, 0); r.Status != wire.StatusSuccess {
		t.Fatalf("a watch after a timeout: %+v", r)
	}
	wantOverloaded(t, "a watch over the bound after the timeout", watch(ws, k[4], 6, 0, 0))
	// A node that stops mastering groups lets go of their watches.
	c.takeOver(c.groupOf(k[0]), false)
	c.takeOver(c.groupOf(k[3]), false)
	if r := watch(ws, k[4], 6, wire.FlagContinuous, 0); r.Status != wire.StatusSuccess {
		t.Fatalf("a watch after the groups moved away: %+v", r)
	}
}

// TestNamespaceBounds: one namespace keeps at most MaxNamespaceWaits
// blocked acquires and MaxNamespaceWatches watches on a node, whatever
// connections they come over; another namespace is not affected.
func TestNamespaceBounds(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1, Config{MaxNamespaceWaits: 2, MaxNamespaceWatches: 2})
	keys := keysOn(t, c, 1, 3)
	holder := newSink()
	for _, ns := range []string{"ns", "other"} {
		for _, k := range keys {
			if r := c.do(holder, Request{Op: OpAcquire, Namespace: ns, Key: k, Owner: owner(1, 1), TTL: time.Hour}); r.Status != wire.StatusSuccess {
				t.Fatalf("hold %s/%s: %+v", ns, k, r)
			}
		}
	}
	wait := func(ns, k string, client uint64) wire.Response {
		return c.do(newSink(), Request{Op: OpAcquire, Namespace: ns, Key: k, Owner: owner(client, 1), MaxWait: -1, WaitID: 1, TTL: time.Hour})
	}
	watch := func(ns, k string) wire.Response {
		r := watchReq(k, 1, c.do(holder, Request{Op: OpState, Namespace: ns, Key: k}).Token, wire.FlagContinuous, 0)
		r.Namespace = ns
		return c.do(newSink(), r)
	}
	for i, k := range keys[:2] {
		if r := wait("ns", k, uint64(10+i)); r.Status != wire.StatusLockWait {
			t.Fatalf("wait %d: %+v", i, r)
		}
		if r := watch("ns", k); r.Status != wire.StatusSuccess {
			t.Fatalf("watch %d: %+v", i, r)
		}
	}
	wantOverloaded(t, "a third wait in the namespace", wait("ns", keys[2], 20))
	wantOverloaded(t, "a third watch in the namespace", watch("ns", keys[2]))
	if r := wait("other", keys[2], 20); r.Status != wire.StatusLockWait {
		t.Fatalf("a wait in another namespace: %+v", r)
	}
	if r := watch("other", keys[2]); r.Status != wire.StatusSuccess {
		t.Fatalf("a watch in another namespace: %+v", r)
	}
}
