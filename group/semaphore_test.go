package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

func semReq(o wire.Owner, permits, limit uint32) Request {
	return Request{Op: OpAcquire, Key: "sem", Owner: o, Kind: wire.KindSemaphore, Permits: permits, Limit: limit, TTL: 10 * time.Second}
}

func semWait(o wire.Owner, permits, limit uint32, waitID uint64) Request {
	r := semReq(o, permits, limit)
	r.MaxWait, r.WaitID = -1, waitID
	return r
}

// TestSemaphorePermitsAndQueue: grants by permits out of the total, the
// total's mismatch refused, waiters granted in queue order without
// barging, State's per-holder entries, and a release granting permits to
// several waiters in one command.
func TestSemaphorePermitsAndQueue(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	a, b, cs, d := newSink(), newSink(), newSink(), newSink()
	ra := c.do(a, semReq(owner(1, 1), 2, 3))
	if ra.Status != wire.StatusSuccess || ra.Token == 0 {
		t.Fatalf("acquire 2 of 3: %+v", ra)
	}
	// 1 permit left: a try for 2 is refused with the semaphore's usage.
	if r := c.do(b, semReq(owner(2, 1), 2, 3)); r.Status != wire.StatusLockOccupied || r.Permits != 3 || r.InUse != 2 || r.Kind != wire.KindSemaphore {
		t.Fatalf("try 2: %+v", r)
	}
	// Another total is refused, naming the semaphore's.
	if r := c.do(b, semReq(owner(2, 1), 1, 4)); r.Status != wire.StatusBadRequest || r.Permits != 3 {
		t.Fatalf("acquire with total 4: %+v", r)
	}
	// A lock on a semaphore's key is refused.
	if r := c.do(b, Request{Op: OpAcquire, Key: "sem", Owner: owner(2, 2)}); r.Status != wire.StatusLockOccupied {
		t.Fatalf("mutex on a semaphore: %+v", r)
	}
	// C waits for 2; D asks for 1, which is free, but C is ahead: D waits
	// too (no barging).
	if r := c.do(cs, semWait(owner(3, 1), 2, 3, 31)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait 2: %+v", r)
	}
	if r := c.do(d, semWait(owner(4, 1), 1, 3, 41)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait 1 behind 2: %+v", r)
	}
	// A reacquire by the holder keeps its token and permits.
	if r := c.do(a, semReq(owner(1, 1), 2, 3)); r.Status != wire.StatusSuccess || r.Token != ra.Token {
		t.Fatalf("reacquire: %+v", r)
	}
	st := c.state("sem")
	if st.Permits != 3 || st.InUse != 2 || st.QueueLen != 2 || len(st.Locks) != 1 || st.Locks[0].Holder != owner(1, 1) || st.Locks[0].Permits != 2 {
		t.Fatalf("state: %+v", st)
	}
	// A's release grants C (2) and D (1) together: 3 of 3.
	if r := c.do(a, Request{Op: OpRelease, Key: "sem", Owner: owner(1, 1), Token: ra.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	gc, gd := cs.granted(t, 31), d.granted(t, 41)
	if gc.Status != wire.StatusSuccess || gd.Status != wire.StatusSuccess || gc.Token <= ra.Token || gd.Token < gc.Token {
		t.Fatalf("grants %+v %+v after token %d", gc, gd, ra.Token)
	}
	st = c.state("sem")
	if st.InUse != 3 || st.Readers != 2 || len(st.Locks) != 2 {
		t.Fatalf("state after the grants: %+v", st)
	}
}

// TestSemaphoreExpiryAndSetPermits: a vanished holder's permits return at
// its TTL (Lost pushed) and go to the next waiter; lowering the total
// keeps the holders and blocks new grants; raising it grants waiters.
func TestSemaphoreExpiryAndSetPermits(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	a, b, w := newSink(), newSink(), newSink()
	ra := c.do(a, semReq(owner(1, 1), 1, 2))
	rb := c.do(b, semReq(owner(2, 1), 1, 2))
	if ra.Status != wire.StatusSuccess || rb.Status != wire.StatusSuccess {
		t.Fatalf("acquires: %+v %+v", ra, rb)
	}
	// Lower the total to 1 with two permits held: both keep theirs.
	set := func(limit uint32) wire.Response {
		return c.do(newSink(), Request{Op: OpAcquire, Key: "sem", Owner: owner(9, 9), Kind: wire.KindSemaphore, Flags: wire.FlagSetPermits, Limit: limit})
	}
	if r := set(1); r.Status != wire.StatusSuccess || r.Permits != 1 {
		t.Fatalf("set permits 1: %+v", r)
	}
	if st := c.state("sem"); st.Permits != 1 || st.InUse != 2 {
		t.Fatalf("state after lowering: %+v", st)
	}
	// A waiter for 1 (with the new total) waits while usage is over it.
	if r := c.do(w, semWait(owner(3, 1), 1, 1, 7)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait: %+v", r)
	}
	// B releases: 1 in use of 1, the waiter still waits.
	if r := c.do(b, Request{Op: OpRelease, Key: "sem", Owner: owner(2, 1), Token: rb.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release b: %+v", r)
	}
	if st := c.state("sem"); st.InUse != 1 || st.QueueLen != 1 {
		t.Fatalf("state after b's release: %+v", st)
	}
	// Raising the total to 2 grants the waiter.
	if r := set(2); r.Status != wire.StatusSuccess {
		t.Fatalf("set permits 2: %+v", r)
	}
	gw := w.granted(t, 7)
	if gw.Status != wire.StatusSuccess || gw.Token <= rb.Token {
		t.Fatalf("granted after raise: %+v", gw)
	}
	// A waiter for 1 more waits; A never renews: its TTL frees its permit
	// for the waiter, and A is told.
	w2 := newSink()
	if r := c.do(w2, semWait(owner(4, 1), 1, 2, 8)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait 2: %+v", r)
	}
	// The waiter renews, A does not.
	advanceUntil(t, fc, 50*time.Millisecond, "a's permit to expire", func() bool {
		c.do(w, Request{Op: OpRenew, Key: "sem", Owner: owner(3, 1), Token: gw.Token})
		return w2.count(isGranted(8)) > 0
	})
	if l := a.push(t, "a's lost", isLost(ra.Token)).(*wire.Lost); l.Event != wire.EventExpired {
		t.Fatalf("lost: %+v", l)
	}
	if g := w2.granted(t, 8); g.Status != wire.StatusSuccess || g.Token <= gw.Token {
		t.Fatalf("granted after expiry: %+v", g)
	}
	// Set on a free semaphore: nothing to keep, success.
	if r := c.do(newSink(), Request{Op: OpAcquire, Key: "free", Owner: owner(9, 9), Kind: wire.KindSemaphore, Flags: wire.FlagSetPermits, Limit: 3}); r.Status != wire.StatusSuccess {
		t.Fatalf("set on a free semaphore: %+v", r)
	}
}

// TestSemaphoreRecordRoundTrip: a semaphore's checkpoint record decodes to
// the same holds, permits, values and total; a cut record does not.
func TestSemaphoreRecordRoundTrip(t *testing.T) {
	t.Parallel()
	l := &lockRec{}
	l.addSem(holder{owner: owner(1, 2), token: 5, ttlMs: 100, kind: wire.KindSemaphore}, "", 2, 5)
	l.addSem(holder{owner: owner(3, 4), token: 6, ttlMs: 200, kind: wire.KindSemaphore}, "v", 3, 5)
	b := encodeRec(nil, l)
	got, err := decodeRec(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.limit() != 5 || got.n() != 2 || got.permitsAt(0) != 2 || got.permitsAt(1) != 3 || got.value(1) != "v" || got.at(1).token != 6 || got.kind() != wire.KindSemaphore {
		t.Fatalf("decoded %+v %+v", got, got.x)
	}
	for cut := range len(b) {
		if _, err := decodeRec(b[:cut]); err == nil {
			t.Fatalf("record cut at %d decoded", cut)
		}
	}
	got.remove(0)
	if got.n() != 1 || got.permitsAt(0) != 3 || got.value(0) != "v" {
		t.Fatalf("after remove: %+v %+v", got, got.x)
	}
}

// TestSemaphoreReacquireSetsPermits: an acquire by an owner that holds
// permits keeps its token and takes the asked number when the others
// leave room (fewer permits let a waiter in), and is refused, unchanged,
// when they do not.
func TestSemaphoreReacquireSetsPermits(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	a, b, w := newSink(), newSink(), newSink()
	ra := c.do(a, semReq(owner(1, 1), 2, 3))
	rb := c.do(b, semReq(owner(2, 1), 1, 3))
	if ra.Status != wire.StatusSuccess || rb.Status != wire.StatusSuccess {
		t.Fatalf("acquires: %+v %+v", ra, rb)
	}
	if r := c.do(w, semWait(owner(3, 1), 2, 3, 5)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait: %+v", r)
	}
	// 3 for A: B's 1 leaves no room; refused, A keeps 2.
	if r := c.do(a, semReq(owner(1, 1), 3, 3)); r.Status != wire.StatusLockOccupied {
		t.Fatalf("reacquire for 3: %+v", r)
	}
	if st := c.state("sem"); st.InUse != 3 {
		t.Fatalf("state after a refused reacquire: %+v", st)
	}
	// 1 for A, same token: 2 in use, and the waiter for 2 waits until B
	// releases.
	if r := c.do(a, semReq(owner(1, 1), 1, 3)); r.Status != wire.StatusSuccess || r.Token != ra.Token {
		t.Fatalf("reacquire for 1: %+v", r)
	}
	if st := c.state("sem"); st.InUse != 2 || st.QueueLen != 1 {
		t.Fatalf("state after reacquire for 1: %+v", st)
	}
	if r := c.do(b, Request{Op: OpRelease, Key: "sem", Owner: owner(2, 1), Token: rb.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release b: %+v", r)
	}
	if g := w.granted(t, 5); g.Status != wire.StatusSuccess {
		t.Fatalf("granted: %+v", g)
	}
	if st := c.state("sem"); st.InUse != 3 {
		t.Fatalf("state at the end: %+v", st)
	}
}
