package group

import (
	"github.com/paxlock/paxlock/internal/testutil"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
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
	if w := c.do(jumper, Request{Op: OpAcquire, Key: key, Owner: owner(3, 1), MaxWait: -1, WaitID: 3, TTL: time.Hour, WaitedMs: 24 * 60 * 60 * 1000}); w.Status != wire.StatusLockWait {
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

// TestMaxHoldersPerKey: with MaxHoldersPerKey 2, a third reader's
// try-lock is answered OVERLOADED with RetryAfterMs, a third blocking
// reader waits and is granted when a reader releases, and a semaphore
// with room for ten permits still takes no third holder.
func TestMaxHoldersPerKey(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{MaxHoldersPerKey: 2})
	s := newSink()
	read := func(key string, o uint64, wait time.Duration, id uint64) wire.Response {
		return c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(o, 1), Kind: wire.KindRead, TTL: time.Minute, MaxWait: wait, WaitID: id})
	}
	var toks []uint64
	for o := uint64(1); o <= 2; o++ {
		r := read("readers", o, 0, 0)
		if r.Status != wire.StatusSuccess {
			t.Fatalf("reader %d: %+v", o, r)
		}
		toks = append(toks, r.Token)
	}
	wantOverloaded(t, "a third reader's try-lock", read("readers", 3, 0, 0))
	if r := read("readers", 3, -1, 33); r.Status != wire.StatusLockWait {
		t.Fatalf("a third blocking reader: %+v, want LOCK_WAIT", r)
	}
	if st := c.state("readers"); st.Readers != 2 {
		t.Fatalf("%d readers, want 2", st.Readers)
	}
	if r := c.do(s, Request{Op: OpRelease, Key: "readers", Owner: owner(1, 1), Token: toks[0]}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	if g := s.granted(t, 33); g.Status != wire.StatusSuccess {
		t.Fatalf("the waiting reader after a release: %+v", g)
	}
	sem := func(o uint64) wire.Response {
		return c.do(s, Request{Op: OpAcquire, Key: "sem", Owner: owner(o, 1), Kind: wire.KindSemaphore, Permits: 1, Limit: 10, TTL: time.Minute})
	}
	for o := uint64(1); o <= 2; o++ {
		if r := sem(o); r.Status != wire.StatusSuccess {
			t.Fatalf("semaphore holder %d: %+v", o, r)
		}
	}
	wantOverloaded(t, "a third semaphore holder", sem(3))
}

// TestQuotaRateRenew: renewals count against the namespace's rate. With
// a rate of 1/s and a burst of 1, a renewal sent early (all its TTL
// left) or one setting a value is refused OVERLOADED past the rate; a
// renewal the hold needs (less than three quarters of its TTL left) is
// never refused, but takes its token, so the next request is refused.
func TestQuotaRateRenew(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := quotaCluster(t, 1, Config{Clock: fc}, Quota{Rate: 1, Burst: 1})
	s := newSink()
	r := c.do(s, Request{Op: OpAcquire, Namespace: "ns", Key: "held", Owner: owner(1, 1), TTL: 8 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatal(r)
	}
	renew := func(setValue bool) wire.Response {
		return c.do(s, Request{Op: OpRenew, Namespace: "ns", Key: "held", Owner: owner(1, 1), Token: r.Token, SetValue: setValue, Value: "v"})
	}
	wantOverloaded(t, "an early renewal past the rate", renew(false))
	fc.Advance(3 * time.Second) // 5 s of 8 left: needed; the bucket refilled
	if r := c.do(s, Request{Op: OpState, Namespace: "ns", Key: "held"}); r.Status != wire.StatusSuccess {
		t.Fatalf("state after the refill: %+v", r)
	}
	wantOverloaded(t, "a renewal setting a value past the rate", renew(true))
	if rr := renew(false); rr.Status != wire.StatusSuccess {
		t.Fatalf("a needed renewal past the rate: %+v", rr)
	}
	// The state query's token is back; the renewal's charge is not yet.
	fc.Advance(1100 * time.Millisecond)
	wantOverloaded(t, "a state query after a charged renewal", c.do(s, Request{Op: OpState, Namespace: "ns", Key: "held"}))
}

// TestSemaphoreStateFitsFrame: the State of a semaphore with a thousand
// holders, each with a value of wire.MaxValueLen bytes, lists as many
// holders as fit well under the frame limit and says More; its encoded
// answer fits wire.DefaultMaxFrame.
func TestSemaphoreStateFitsFrame(t *testing.T) {
	t.Parallel()
	const n = wire.MaxListLimit
	c := newFakeCluster(t, 1, Config{MaxHoldersPerKey: n})
	s := newSink()
	value := strings.Repeat("v", wire.MaxValueLen)
	for o := uint64(1); o <= n; o++ {
		r := c.do(s, Request{Op: OpAcquire, Key: "pool", Owner: owner(o, 1), Kind: wire.KindSemaphore, Permits: 1, Limit: n, TTL: time.Minute, Value: value})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("holder %d: %+v", o, r)
		}
	}
	st := c.state("pool")
	if st.Readers != n || !st.More || len(st.Locks) == 0 || len(st.Locks) >= n {
		t.Fatalf("state: %d holders, %d listed, More %v; want %d, fewer listed, More", st.Readers, len(st.Locks), st.More, n)
	}
	frame, err := wire.AppendFrame(nil, wire.TypeResponse, 1, &st)
	if err != nil || len(frame) > wire.DefaultMaxFrame {
		t.Fatalf("the answer's frame: %d bytes, %v; want at most %d", len(frame), err, wire.DefaultMaxFrame)
	}
}

// TestQuotaRateList: a List counts against its namespace's rate by the
// keys it matches: with a rate of 1/s and a burst of 1, a List past the
// bucket is refused OVERLOADED, and one matching 250 keys costs three
// requests, so that a state query two seconds later is still refused
// (one that a List of few keys leaves room for).
func TestQuotaRateList(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 1, Config{Clock: fc})
	s := newSink()
	keys := keysInGroup(c.groups, "ns", 250)
	for i, k := range keys {
		if r := c.do(s, Request{Op: OpAcquire, Namespace: "ns", Key: k, Owner: owner(1, uint64(i+1)), TTL: time.Hour}); r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %+v", k, r)
		}
	}
	_, sys := c.groupMaster(NamespaceGroup)
	if err := sys.PutNamespace(t.Context(), "ns", "pw"); err != nil {
		t.Fatal(err)
	}
	q := Quota{Rate: 1, Burst: 1}
	if err := sys.PutQuota(t.Context(), "ns", q); err != nil {
		t.Fatal(err)
	}
	svc := c.svc(1)
	testutil.Eventually(t, 10*time.Second, func() bool { return svc.QuotaUsage()["ns"].Quota == q }, "the quota to be enforced")
	g := wire.GroupOf(wire.KeyHash("ns", keys[0]), c.groups)
	list := func() wire.Response {
		got := make(chan wire.Response, 1)
		svc.List("ns", ID(g), "", "", wire.MaxListLimit, func(r wire.Response) { got <- r })
		return <-got
	}
	fc.Advance(time.Minute)
	if r := list(); r.Status != wire.StatusSuccess || len(r.Locks) != len(keys) {
		t.Fatalf("list: %s, %d locks; want all %d", r.Status, len(r.Locks), len(keys))
	}
	wantOverloaded(t, "a list past the rate", list())
	fc.Advance(2 * time.Second)
	wantOverloaded(t, "a state query two seconds after a list of 250 keys", c.do(s, Request{Op: OpState, Namespace: "ns", Key: keys[0]}))
}
