package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// TestMaxWaitedBounded: a re-sent wait's claim to have waited already
// (Request.Waited, the client's WaitedMs) counts for at most MaxWaited.
// A waiter that queued two minutes before a claim of a day, with
// MaxWaited one minute, is still served first.
func TestMaxWaitedBounded(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc, MaxWaited: time.Minute})
	const key = "queue"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("holder: %+v", r)
	}
	honest := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, honest)
	fc.Advance(2 * time.Minute)
	jumper := newSink()
	if w := c.do(jumper, Request{Op: OpAcquire, Key: key, Owner: owner(3, 1), MaxWait: -1, WaitID: 3, TTL: time.Hour, Waited: 24 * time.Hour}); w.Status != wire.StatusLockWait {
		t.Fatalf("jumper: %+v, want LOCK_WAIT", w)
	}
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if g := honest.sink.granted(t, honest.waitID); g.Status != wire.StatusSuccess {
		t.Fatalf("the waiter that queued first: %+v", g)
	}
	if n := jumper.count(isGranted(3)); n != 0 {
		t.Fatal("the claim of a day's wait was served before the waiter ahead of it")
	}
}
