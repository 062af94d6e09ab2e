package lockservice

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
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
