package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
)

type waiterSpec struct {
	owner  wire.Owner
	weight uint8
	kind   wire.Kind
	sink   *testSink
	waitID uint64
	token  uint64
}

// enqueue makes w wait for key; it must be answered LOCK_WAIT.
func enqueue(t *testing.T, c lockCluster, key string, w *waiterSpec) {
	t.Helper()
	w.sink = newSink()
	r := c.do(w.sink, Request{Op: OpAcquire, Key: key, Owner: w.owner, Kind: w.kind, Weight: w.weight, MaxWait: -1, WaitID: w.waitID, TTL: 20 * time.Second})
	if r.Status != wire.StatusLockWait {
		t.Fatalf("waiter %v: %+v, want LOCK_WAIT", w.owner, r)
	}
}

func grantedCount(ws []*waiterSpec) int {
	n := 0
	for _, w := range ws {
		n += w.sink.count(isGranted(w.waitID))
	}
	return n
}

// TestGrantByWeightThenArrival: a freed lock goes to the heaviest
// waiter, equal weights in arrival order, one waiter per release.
func TestGrantByWeightThenArrival(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "hot"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 20 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	weights := []uint8{1, 5, 5, 3, 10, 0, 5, 3}
	var ws []*waiterSpec
	for i, wt := range weights {
		w := &waiterSpec{owner: owner(100+uint64(i), 1), weight: wt, waitID: 1000 + uint64(i)}
		enqueue(t, c, key, w)
		ws = append(ws, w)
	}
	if st := c.state(key); st.QueueLen != uint32(len(ws)) {
		t.Fatalf("queue length %d, want %d", st.QueueLen, len(ws))
	}
	// Heaviest first; equal weights (0 is the default weight 1) by arrival.
	order := []int{4, 1, 2, 6, 3, 7, 0, 5}
	cur := struct {
		owner wire.Owner
		token uint64
		sink  *testSink
	}{owner(1, 1), r.Token, hs}
	for n, i := range order {
		if rr := c.do(cur.sink, Request{Op: OpRelease, Key: key, Owner: cur.owner, Token: cur.token}); rr.Status != wire.StatusSuccess {
			t.Fatalf("release by %v: %+v", cur.owner, rr)
		}
		w := ws[i]
		g := w.sink.granted(t, w.waitID)
		if g.Status != wire.StatusSuccess || g.Token <= cur.token || g.Owner != w.owner {
			t.Fatalf("grant %d: %+v, previous token %d", n, g, cur.token)
		}
		// No herd: after the barrier exactly n+1 waiters were woken.
		st := c.state(key)
		if got := grantedCount(ws); got != n+1 {
			t.Fatalf("after grant %d, %d waiters were granted", n, got)
		}
		if st.Holder != w.owner || st.Token != g.Token || st.QueueLen != uint32(len(ws)-n-1) {
			t.Fatalf("state after the grant to %v: %+v", w.owner, st)
		}
		cur.owner, cur.token, cur.sink = w.owner, g.Token, w.sink
	}
}

// TestReadersTogetherWriterBlocksReaders: releasing a write lock grants
// all the queued readers in one command (one shared token); a waiting
// writer holds back new readers; the writer is granted alone.
func TestReadersTogetherWriterBlocksReaders(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "rw"
	ws := newSink()
	r := c.do(ws, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), Kind: wire.KindWrite, TTL: 20 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("write acquire: %+v", r)
	}
	// Readers queue behind the writer.
	var readers []*waiterSpec
	for i := range 3 {
		w := &waiterSpec{owner: owner(10+uint64(i), 1), kind: wire.KindRead, waitID: 10 + uint64(i)}
		enqueue(t, c, key, w)
		readers = append(readers, w)
	}
	// Then a writer, then a reader that must queue behind that writer.
	w2 := &waiterSpec{owner: owner(20, 1), kind: wire.KindWrite, waitID: 20}
	enqueue(t, c, key, w2)
	late := &waiterSpec{owner: owner(30, 1), kind: wire.KindRead, waitID: 30}
	enqueue(t, c, key, late)
	all := append(append([]*waiterSpec{}, readers...), w2, late)

	if rr := c.do(ws, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	var tok uint64
	for _, rd := range readers {
		g := rd.sink.granted(t, rd.waitID)
		if g.Status != wire.StatusSuccess || g.Token <= r.Token {
			t.Fatalf("reader %v: %+v", rd.owner, g)
		}
		if tok != 0 && g.Token != tok {
			t.Fatalf("readers granted with tokens %d and %d: not one command", tok, g.Token)
		}
		tok = g.Token
		rd.token = g.Token
	}
	st := c.state(key)
	if st.Kind != wire.KindRead || st.Readers != 3 || st.QueueLen != 2 {
		t.Fatalf("state with three readers: %+v", st)
	}
	if n := grantedCount(all); n != 3 {
		t.Fatalf("%d waiters granted, want the 3 readers only", n)
	}
	// A new reader is held back by the waiting writer, even as a try-lock.
	if rr := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(40, 1), Kind: wire.KindRead}); rr.Status != wire.StatusLockOccupied {
		t.Fatalf("new reader with a writer waiting: %+v", rr)
	}
	// A reader that already holds may reacquire (it keeps its token).
	if rr := c.do(readers[0].sink, Request{Op: OpAcquire, Key: key, Owner: readers[0].owner, Kind: wire.KindRead}); rr.Status != wire.StatusSuccess || rr.Token != tok {
		t.Fatalf("reader reacquire: %+v", rr)
	}
	// Two readers leave: the writer still waits.
	for _, rd := range readers[:2] {
		if rr := c.do(rd.sink, Request{Op: OpRelease, Key: key, Owner: rd.owner, Token: rd.token}); rr.Status != wire.StatusSuccess {
			t.Fatalf("reader release: %+v", rr)
		}
	}
	c.state(key)
	if n := grantedCount(all); n != 3 {
		t.Fatalf("%d granted while a reader still holds", n)
	}
	// The last reader leaves: the writer alone gets it.
	if rr := c.do(readers[2].sink, Request{Op: OpRelease, Key: key, Owner: readers[2].owner, Token: readers[2].token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("last reader release: %+v", rr)
	}
	g := w2.sink.granted(t, w2.waitID)
	if g.Status != wire.StatusSuccess || g.Token <= tok {
		t.Fatalf("writer: %+v", g)
	}
	c.state(key)
	if n := grantedCount(all); n != 4 {
		t.Fatalf("%d granted, want the writer alone after the readers", n)
	}
	// The writer leaves: the late reader gets it.
	if rr := c.do(w2.sink, Request{Op: OpRelease, Key: key, Owner: w2.owner, Token: g.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("writer release: %+v", rr)
	}
	if g2 := late.sink.granted(t, late.waitID); g2.Status != wire.StatusSuccess || g2.Token <= g.Token {
		t.Fatalf("late reader: %+v", g2)
	}
}

// TestOneWriterPerRelease: with several writers queued, each release
// wakes exactly one of them.
func TestOneWriterPerRelease(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "mutex"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 20 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	var ws []*waiterSpec
	for i := range 4 {
		w := &waiterSpec{owner: owner(50+uint64(i), 1), waitID: 50 + uint64(i)}
		enqueue(t, c, key, w)
		ws = append(ws, w)
	}
	tok, o, s := r.Token, owner(1, 1), hs
	for i, w := range ws {
		if rr := c.do(s, Request{Op: OpRelease, Key: key, Owner: o, Token: tok}); rr.Status != wire.StatusSuccess {
			t.Fatalf("release: %+v", rr)
		}
		g := w.sink.granted(t, w.waitID)
		c.state(key)
		if n := grantedCount(ws); n != i+1 {
			t.Fatalf("release %d woke %d waiters in all, want %d", i, n, i+1)
		}
		if g.Token <= tok {
			t.Fatalf("token %d after %d", g.Token, tok)
		}
		tok, o, s = g.Token, w.owner, w.sink
	}
}

// TestWaitTimeoutAndCancel: a waiter whose MaxWait runs out is told
// TIMEOUT and leaves the queue; a cancelled waiter is not granted.
func TestWaitTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "k"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Minute})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	a, b, d := newSink(), newSink(), newSink()
	if rr := c.do(a, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), MaxWait: 5 * time.Second, WaitID: 2}); rr.Status != wire.StatusLockWait {
		t.Fatalf("waiter a: %+v", rr)
	}
	if rr := c.do(b, Request{Op: OpAcquire, Key: key, Owner: owner(3, 1), MaxWait: -1, WaitID: 3}); rr.Status != wire.StatusLockWait {
		t.Fatalf("waiter b: %+v", rr)
	}
	if rr := c.do(d, Request{Op: OpAcquire, Key: key, Owner: owner(4, 1), MaxWait: -1, WaitID: 4}); rr.Status != wire.StatusLockWait {
		t.Fatalf("waiter d: %+v", rr)
	}
	fc.Advance(5 * time.Second)
	if g := a.granted(t, 2); g.Status != wire.StatusTimeout {
		t.Fatalf("waiter a: %+v, want TIMEOUT", g)
	}
	if rr := c.do(b, Request{Op: OpCancelWait, Key: key, Owner: owner(3, 1), WaitID: 3}); rr.Status != wire.StatusSuccess || rr.Token != 0 {
		t.Fatalf("cancel: %+v", rr)
	}
	if st := c.state(key); st.QueueLen != 1 {
		t.Fatalf("queue after timeout and cancel: %+v", st)
	}
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if g := d.granted(t, 4); g.Status != wire.StatusSuccess {
		t.Fatalf("waiter d: %+v", g)
	}
	c.state(key)
	if a.count(isGranted(2)) != 1 || b.count(isGranted(3)) != 0 {
		t.Fatal("a timed-out or cancelled waiter was granted")
	}
}

// TestWeightAgingBoundsStarvation: a light waiter under a continuous
// stream of heavier ones is granted once it has waited (difference of
// weights) × WeightAging, not never: with strict priority (the queue's
// order before aging) the stream of weight-10 waiters below would starve
// the weight-1 waiter forever.
func TestWeightAgingBoundsStarvation(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	const aging = time.Second
	c := newFakeCluster(t, 3, Config{Clock: clk, WeightAging: aging})
	const key = "hot"
	cur := &waiterSpec{owner: owner(1, 1), sink: newSink()}
	r := c.do(cur.sink, Request{Op: OpAcquire, Key: key, Owner: cur.owner, TTL: 20 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	cur.token = r.Token
	light := &waiterSpec{owner: owner(2, 1), weight: wire.MinWeight, waitID: 2}
	enqueue(t, c, key, light)

	// Every step a heavy waiter arrives and the holder hands the key on.
	const step = 500 * time.Millisecond
	want := int((wire.MaxWeight - wire.MinWeight) * aging / step) // the light waiter's turn
	for n := 1; ; n++ {
		clk.Advance(step)
		heavy := &waiterSpec{owner: owner(100+uint64(n), 1), weight: wire.MaxWeight, waitID: 100 + uint64(n)}
		enqueue(t, c, key, heavy)
		if rr := c.do(cur.sink, Request{Op: OpRelease, Key: key, Owner: cur.owner, Token: cur.token}); rr.Status != wire.StatusSuccess {
			t.Fatalf("release by %v: %+v", cur.owner, rr)
		}
		st := c.state(key)
		if st.Holder == light.owner {
			if n != want {
				t.Fatalf("light waiter granted at step %d, want step %d (after %v of waiting)", n, want, time.Duration(want)*step)
			}
			return
		}
		if n >= want {
			t.Fatalf("step %d: holder %v, light waiter still queued after %v (bound %v)", n, st.Holder, time.Duration(n)*step, (wire.MaxWeight-wire.MinWeight)*aging)
		}
		// Before its turn, the newest heavy waiter is ahead of the light
		// one, and the only one queued: it holds the key now.
		g := heavy.sink.granted(t, heavy.waitID)
		if g.Status != wire.StatusSuccess || st.Holder != heavy.owner || st.Token != g.Token {
			t.Fatalf("step %d: holder %v (%+v), want the heavy waiter %v", n, st.Holder, g, heavy.owner)
		}
		heavy.token = g.Token
		cur = heavy
	}
}

// TestDowngrade: the state machine's side of wire.FlagDowngrade — a write
// hold becomes a read hold with the same token (again: still success),
// queued readers join, a waiting writer stays queued; other owners and
// exclusive holds are refused.
func TestDowngrade(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "rw"
	s := newSink()
	w := owner(1, 1)
	r := c.do(s, Request{Op: OpAcquire, Key: key, Owner: w, Kind: wire.KindWrite, TTL: 20 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("write acquire: %+v", r)
	}
	reader := &waiterSpec{owner: owner(2, 1), kind: wire.KindRead, waitID: 2}
	enqueue(t, c, key, reader)
	down := Request{Op: OpAcquire, Key: key, Owner: w, Kind: wire.KindRead, Flags: wire.FlagDowngrade, TTL: 20 * time.Second}
	for i := range 2 { // the second is a retry: done already
		if d := c.do(s, down); d.Status != wire.StatusSuccess || d.Token != r.Token {
			t.Fatalf("downgrade %d: %+v, want SUCCESS with token %d", i, d, r.Token)
		}
	}
	g := reader.sink.granted(t, reader.waitID)
	if g.Status != wire.StatusSuccess {
		t.Fatalf("queued reader after the downgrade: %+v", g)
	}
	if st := c.state(key); st.Kind != wire.KindRead || st.Readers != 2 {
		t.Fatalf("state after downgrade: %+v, want 2 readers", st)
	}
	// Not the holder: refused, nothing changes.
	other := down
	other.Owner = owner(3, 1)
	if d := c.do(newSink(), other); d.Status != wire.StatusLockChangedOwner {
		t.Fatalf("downgrade by a non-holder: %+v", d)
	}
	// An exclusive hold cannot be downgraded.
	m := c.do(s, Request{Op: OpAcquire, Key: "mutex", Owner: w, Kind: wire.KindExclusive, TTL: 20 * time.Second})
	if m.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", m)
	}
	ex := down
	ex.Key = "mutex"
	if d := c.do(s, ex); d.Status != wire.StatusBadRequest {
		t.Fatalf("downgrade of an exclusive hold: %+v", d)
	}
	if st := c.state("mutex"); st.Kind != wire.KindExclusive || st.Token != m.Token {
		t.Fatalf("exclusive hold after a refused downgrade: %+v", st)
	}
}
