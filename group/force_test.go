package group

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// forceAsync runs ForceRelease of key on svc in the background; the
// returned channel yields its result.
type forceResult struct {
	got []Released
	err error
}

func forceAsync(ctx context.Context, svc *Service, key string) <-chan forceResult {
	ch := make(chan forceResult, 1)
	go func() {
		got, err := svc.ForceRelease(ctx, "ns", key)
		ch <- forceResult{got, err}
	}()
	return ch
}

// notYet fails the test if the force release has returned.
func notYet(t *testing.T, ch <-chan forceResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: ForceRelease returned %+v, %v while the holder had not acknowledged and its deadline had not passed", what, r.got, r.err)
	default:
	}
}

func waitForce(t *testing.T, ch <-chan forceResult) forceResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("ForceRelease did not return")
		return forceResult{}
	}
}

// TestForceRelease: an operator's force-unlock revokes the holds there
// were when it started. The holder hears EventRevoked; until it
// acknowledges by releasing the token, the key stays held — its renewals
// and reacquires are answered REVOKED and the waiter is not granted — so
// that nobody else holds the key while the holder may still believe it
// does. Its release ends the hold as revoked (watchers hear EventRevoked)
// and hands the key on to the waiter, whose new hold it leaves alone.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "stuck"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	ws := newSink()
	if w := c.do(ws, Request{Op: OpWatch, Key: key, WatchID: 7, Token: r.Token, Flags: wire.FlagContinuous, MaxWait: -1}); w.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", w)
	}
	waiter := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, waiter)

	done := forceAsync(ctx, c.master("ns", key), key)
	hs.push(t, "Lost EventRevoked", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Key == key && l.Token == r.Token && l.Event == wire.EventRevoked
	})
	if rr := c.do(hs, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: r.Token, TTL: time.Hour}); rr.Status != wire.StatusRevoked {
		t.Fatalf("renewal of a revoked hold: %+v, want REVOKED", rr)
	}
	if rr := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour}); rr.Status != wire.StatusRevoked {
		t.Fatalf("reacquire of a revoked hold: %+v, want REVOKED", rr)
	}
	if st := c.state(key); st.Holder != owner(1, 1) {
		t.Fatalf("holder before the acknowledgement: %+v, want the revoked holder still", st)
	}
	if n := waiter.sink.count(isGranted(waiter.waitID)); n != 0 {
		t.Fatal("the waiter was granted before the revoked holder acknowledged")
	}
	notYet(t, done, "before the acknowledgement")

	// The holder acknowledges.
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("the revoked holder's release: %+v", rr)
	}
	res := waitForce(t, done)
	if res.err != nil || len(res.got) != 1 || res.got[0].Owner != owner(1, 1) || res.got[0].Token != r.Token {
		t.Fatalf("ForceRelease removed %+v (%v), want the hold of %v with token %d", res.got, res.err, owner(1, 1), r.Token)
	}
	evs := ws.waitWatch(t, 7, 1)
	if evs[0].Event != wire.EventRevoked {
		t.Fatalf("watch event %+v, want EventRevoked", evs[0])
	}
	g := waiter.sink.granted(t, waiter.waitID)
	if g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("waiter after the force release: %+v", g)
	}
	if st := c.state(key); st.Holder != waiter.owner {
		t.Fatalf("holder after the force release: %+v", st)
	}
	// A free key: nothing to do.
	if got, err := c.master("ns", "free").ForceRelease(ctx, "ns", "free"); err != nil || len(got) != 0 {
		t.Fatalf("ForceRelease of a free key: %+v, %v", got, err)
	}
	// A node that does not serve the group says so.
	for _, id := range c.peers {
		svc := c.svc(id)
		if svc == c.master("ns", key) {
			continue
		}
		if _, err := svc.ForceRelease(ctx, "ns", key); !errors.Is(err, ErrNotMaster) {
			t.Fatalf("ForceRelease on node %d (not master): %v, want ErrNotMaster", id, err)
		}
		break
	}
}

// TestForceReleaseAtDeadline: a revoked holder that never acknowledges
// (its process is gone, or cut off) keeps the key until its deadline —
// which its own client reaches first — and not a moment less; then the
// key goes, as revoked, to the waiter. Several readers: each is revoked
// and all go.
func TestForceReleaseAtDeadline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "silent"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 10 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	waiter := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, waiter)
	done := forceAsync(ctx, c.master("ns", key), key)
	hs.push(t, "Lost EventRevoked", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Token == r.Token && l.Event == wire.EventRevoked
	})
	fc.Advance(9 * time.Second)
	notYet(t, done, "a second before the deadline")
	if n := waiter.sink.count(isGranted(waiter.waitID)); n != 0 {
		t.Fatal("the waiter was granted before the revoked hold's deadline")
	}
	fc.Advance(2 * time.Second)
	res := waitForce(t, done)
	if res.err != nil || len(res.got) != 1 || res.got[0].Token != r.Token {
		t.Fatalf("ForceRelease at the deadline: %+v, %v", res.got, res.err)
	}
	if g := waiter.sink.granted(t, waiter.waitID); g.Status != wire.StatusSuccess {
		t.Fatalf("waiter after the deadline: %+v", g)
	}

	// Readers with deadlines 10 s apart: each is revoked in turn (its
	// holder told) before the clock reaches its deadline.
	rs := newSink()
	for i := range 3 {
		rr := c.do(rs, Request{Op: OpAcquire, Key: "read", Owner: owner(10+uint64(i), 1), Kind: wire.KindRead, TTL: time.Duration(5+10*i) * time.Second})
		if rr.Status != wire.StatusSuccess {
			t.Fatalf("read acquire %d: %+v", i, rr)
		}
	}
	done = forceAsync(ctx, c.master("ns", "read"), "read")
	for i := range 3 {
		rs.push(t, "a reader's Lost EventRevoked", func(m wire.Message) bool {
			l, ok := m.(*wire.Lost)
			return ok && l.Owner == owner(10+uint64(i), 1) && l.Event == wire.EventRevoked
		})
		notYet(t, done, "readers before their deadline")
		fc.Advance(10 * time.Second)
	}
	if res := waitForce(t, done); res.err != nil || len(res.got) != 3 {
		t.Fatalf("ForceRelease of 3 readers: %+v, %v", res.got, res.err)
	}
	if st := c.state("read"); st.Holder != (wire.Owner{}) || st.Readers != 0 {
		t.Fatalf("read lock after the force release: %+v", st)
	}
}

// TestRevokeAfterMasterChange: a hold granted under one master is
// revoked by the next, which never saw the holder's connection; the
// holder is told anyway, through its client's connection to the new
// master's node (AttachClient), and expiries are told the same way.
func TestRevokeAfterMasterChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "moved"
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(5, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	next := c.takeOver(g, true)
	// The client's connection to the new master's node.
	cs := newSink()
	c.svc(next).AttachClient(5, cs)
	done := forceAsync(ctx, c.svc(next), key)
	cs.push(t, "Lost EventRevoked on the client's connection", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Token == r.Token && l.Owner == owner(5, 1) && l.Event == wire.EventRevoked
	})
	notYet(t, done, "before the acknowledgement")
	if rr := c.do(cs, Request{Op: OpRelease, Key: key, Owner: owner(5, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("acknowledgement: %+v", rr)
	}
	if res := waitForce(t, done); res.err != nil || len(res.got) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", res.got, res.err)
	}

	// An expiry under the new master reaches the holder the same way.
	r = c.do(cs, Request{Op: OpAcquire, Key: key, Owner: owner(5, 2), TTL: 5 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	c.takeOver(g, false)
	_, svc := c.groupMaster(ID(g))
	other := newSink()
	svc.AttachClient(5, other)
	fc.Advance(6 * time.Second)
	other.push(t, "Lost EventExpired after the master change", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Token == r.Token && l.Event == wire.EventExpired
	})
	svc.ForgetClient(5, other)
	if s := svc.clients.sink(5); s == other {
		t.Fatal("ForgetClient left the connection attached")
	}
}

// TestRevokeToldOnLaterAttach: a force-unlock decided by a master that has
// no connection of the holder's client reaches the holder when the client
// connects to that node later, not only when the hold's TTL runs out; a
// connection of another client is told nothing.
func TestRevokeToldOnLaterAttach(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "unreached"
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	r := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(7, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	next := c.takeOver(g, true)
	svc := c.svc(next)
	done := forceAsync(ctx, svc, key)
	sm := svc.groups[g].sm
	stranger := newSink()
	stranger.wait(t, "the revocation applied", func() bool {
		return sm.revokedHold(fullKey("ns", key), owner(7, 1), r.Token)
	})
	svc.AttachClient(8, stranger)
	cs := newSink()
	svc.AttachClient(7, cs)
	cs.push(t, "Lost EventRevoked once the holder's client connects", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Key == key && l.Token == r.Token && l.Owner == owner(7, 1) && l.Event == wire.EventRevoked
	})
	stranger.mu.Lock()
	told := len(stranger.pushes)
	stranger.mu.Unlock()
	if told != 0 {
		t.Fatalf("another client's connection was told %d pushes", told)
	}
	if rr := c.do(cs, Request{Op: OpRelease, Key: key, Owner: owner(7, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("acknowledgement: %+v", rr)
	}
	if res := waitForce(t, done); res.err != nil || len(res.got) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", res.got, res.err)
	}
}
