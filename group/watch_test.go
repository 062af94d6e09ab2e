package group

import (
	"reflect"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

func watchReq(key string, id, token uint64, flags wire.Flags, maxWait time.Duration) Request {
	return Request{Op: OpWatch, Key: key, WatchID: id, Token: token, Flags: flags, MaxWait: maxWait}
}

func wantEvent(t *testing.T, got wire.WatchEvent, ev wire.Event, token uint64, holder wire.Owner) {
	t.Helper()
	if got.Event != ev || got.Token != token || got.Holder != holder {
		t.Fatalf("watch event %+v, want %v token %d holder %v", got, ev, token, holder)
	}
}

// TestWatchEvents: a watch hears of an acquire above its token, of a
// release and of an expiry; a one-shot watch ends after its event, a
// continuous one goes on until Unwatch; a watch whose token is already
// out of date hears at once; a watch with MaxWait times out.
func TestWatchEvents(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "w"
	ws := newSink()
	// A continuous watch and a one-shot watch on a free key.
	if r := c.do(ws, watchReq(key, 1, 0, wire.FlagContinuous, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	if r := c.do(ws, watchReq(key, 2, 0, 0, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	a, b := newSink(), newSink()
	ra := c.do(a, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 5 * time.Second})
	if ra.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", ra)
	}
	wantEvent(t, ws.waitWatch(t, 1, 1)[0], wire.EventAcquired, ra.Token, owner(1, 1))
	wantEvent(t, ws.waitWatch(t, 2, 1)[0], wire.EventAcquired, ra.Token, owner(1, 1))
	// A reacquire keeps the token: no event.
	if r := c.do(a, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 5 * time.Second}); r.Status != wire.StatusSuccess || r.Token != ra.Token {
		t.Fatalf("reacquire: %+v", r)
	}
	// B waits; A releases: released, then acquired by B in one command.
	if r := c.do(b, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), MaxWait: -1, WaitID: 5, TTL: 5 * time.Second}); r.Status != wire.StatusLockWait {
		t.Fatalf("waiter: %+v", r)
	}
	if r := c.do(a, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: ra.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	gb := b.granted(t, 5)
	evs := ws.waitWatch(t, 1, 3)
	wantEvent(t, evs[1], wire.EventReleased, ra.Token, wire.Owner{})
	wantEvent(t, evs[2], wire.EventAcquired, gb.Token, owner(2, 1))
	// B vanishes: its lock expires.
	advanceUntil(t, fc, 10*time.Millisecond, "expiry", freed(c, key))
	evs = ws.waitWatch(t, 1, 4)
	wantEvent(t, evs[3], wire.EventExpired, gb.Token, wire.Owner{})
	c.state(key)
	if n := len(ws.watchEvents(2)); n != 1 {
		t.Fatalf("one-shot watch had %d events", n)
	}
	// Unwatch: no more events.
	if r := c.do(ws, Request{Op: OpUnwatch, Key: key, WatchID: 1}); r.Status != wire.StatusSuccess {
		t.Fatalf("unwatch: %+v", r)
	}
	rc := c.do(a, Request{Op: OpAcquire, Key: key, Owner: owner(3, 1), TTL: 5 * time.Second})
	if rc.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", rc)
	}
	c.state(key)
	if n := len(ws.watchEvents(1)); n != 4 {
		t.Fatalf("unwatched watch had %d events, want 4", n)
	}
	// Out-of-date tokens are told at once: a lower token hears of the
	// current holder, a token of a lock that is gone hears it released.
	if r := c.do(ws, watchReq(key, 3, gb.Token, 0, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	wantEvent(t, ws.waitWatch(t, 3, 1)[0], wire.EventAcquired, rc.Token, owner(3, 1))
	if r := c.do(ws, watchReq("other", 4, 12345, 0, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	wantEvent(t, ws.waitWatch(t, 4, 1)[0], wire.EventReleased, 12345, wire.Owner{})
	// A watch with MaxWait and no change times out.
	if r := c.do(ws, watchReq(key, 6, rc.Token, 0, 2*time.Second)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	c.state(key) // the watch answers before it reads the clock for its deadline
	fc.Advance(2 * time.Second)
	if e := ws.waitWatch(t, 6, 1)[0]; e.Event != wire.EventTimeout {
		t.Fatalf("watch with MaxWait: %+v", e)
	}
}

// TestWatchThenAcquireLeaderElection: candidates that lose the race
// watch the leader's token; when the leader vanishes and its lock
// expires they are told, one takes over with a higher token, and the
// other watches the new leader.
func TestWatchThenAcquireLeaderElection(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "leader"
	type cand struct {
		o    wire.Owner
		sink *testSink
	}
	cands := []*cand{{owner(1, 1), newSink()}, {owner(2, 1), newSink()}, {owner(3, 1), newSink()}}
	// Each candidate: try to lead; if refused, watch the leader's token.
	var leader *cand
	var tok uint64
	var watchID uint64
	campaign := func(cd *cand) {
		r := c.do(cd.sink, Request{Op: OpAcquire, Key: key, Owner: cd.o, TTL: 5 * time.Second})
		switch r.Status {
		case wire.StatusSuccess:
			if r.Token <= tok {
				t.Fatalf("new leader's token %d, old %d", r.Token, tok)
			}
			leader, tok = cd, r.Token
		case wire.StatusLockOccupied:
			if r.Token != tok || r.Holder != leader.o {
				t.Fatalf("occupied: %+v, leader %v token %d", r, leader.o, tok)
			}
			watchID++
			if w := c.do(cd.sink, watchReq(key, watchID, r.Token, 0, 0)); w.Status != wire.StatusSuccess {
				t.Fatalf("watch: %+v", w)
			}
		default:
			t.Fatalf("campaign: %+v", r)
		}
	}
	for _, cd := range cands {
		campaign(cd)
	}
	if leader != cands[0] {
		t.Fatalf("leader %v", leader.o)
	}
	// The leader renews for a while: followers hear nothing.
	for range 4 {
		fc.Advance(3 * time.Second)
		if r := c.do(leader.sink, Request{Op: OpRenew, Key: key, Owner: leader.o, Token: tok}); r.Status != wire.StatusSuccess {
			t.Fatalf("renew: %+v", r)
		}
	}
	c.state(key)
	for _, cd := range cands[1:] {
		if n := cd.sink.count(func(m wire.Message) bool { _, ok := m.(*wire.WatchEvent); return ok }); n != 0 {
			t.Fatalf("follower %v had %d events while the leader renewed", cd.o, n)
		}
	}
	// The leader vanishes.
	old := leader
	c.master("ns", key).ForgetClient(old.o.Client, old.sink)
	advanceUntil(t, fc, 10*time.Millisecond, "the leader's lock to expire", freed(c, key))
	for i, cd := range cands[1:] {
		wantEvent(t, cd.sink.waitWatch(t, uint64(i+1), 1)[0], wire.EventExpired, tok, wire.Owner{})
	}
	oldTok := tok
	for _, cd := range cands[1:] {
		campaign(cd)
	}
	if leader != cands[1] || tok <= oldTok {
		t.Fatalf("after the leader vanished: leader %v token %d (old %d)", leader.o, tok, oldTok)
	}
	// The new leader steps down: the remaining follower takes over.
	if r := c.do(leader.sink, Request{Op: OpRelease, Key: key, Owner: leader.o, Token: tok}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	wantEvent(t, cands[2].sink.waitWatch(t, watchID, 1)[0], wire.EventReleased, tok, wire.Owner{})
	campaign(cands[2])
	if leader != cands[2] {
		t.Fatalf("leader %v, want %v", leader.o, cands[2].o)
	}
}

// TestStateQuery: holder, token, kind, readers, TTL left and queue
// length; an empty key is LOCK_DELETED; a non-master says NO_MASTER.
func TestStateQuery(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	if st := c.state("k"); st.Status != wire.StatusLockDeleted || st.QueueLen != 0 {
		t.Fatalf("free key: %+v", st)
	}
	a := newSink()
	r := c.do(a, Request{Op: OpAcquire, Key: "k", Owner: owner(1, 1), TTL: 10 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	fc.Advance(3 * time.Second)
	for i := range 2 {
		if rr := c.do(newSink(), Request{Op: OpAcquire, Key: "k", Owner: owner(2+uint64(i), 1), MaxWait: -1, WaitID: 1}); rr.Status != wire.StatusLockWait || rr.QueueLen != uint32(i+1) {
			t.Fatalf("waiter %d: %+v", i, rr)
		}
	}
	st := c.state("k")
	want := wire.Response{Status: wire.StatusSuccess, Holder: owner(1, 1), Token: r.Token, Kind: wire.KindExclusive, TTLLeftMs: 7000, QueueLen: 2}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("state: %+v\nwant   %+v", st, want)
	}
	// A try-lock that is refused carries the same information.
	occ := c.do(newSink(), Request{Op: OpAcquire, Key: "k", Owner: owner(9, 1)})
	want.Status = wire.StatusLockOccupied
	if !reflect.DeepEqual(occ, want) {
		t.Fatalf("occupied: %+v\nwant      %+v", occ, want)
	}
	// Readers: the count, and the asker's own hold.
	var toks []uint64
	for i := range 3 {
		rr := c.do(newSink(), Request{Op: OpAcquire, Key: "r", Owner: owner(10+uint64(i), 1), Kind: wire.KindRead, TTL: 10 * time.Second})
		if rr.Status != wire.StatusSuccess {
			t.Fatalf("reader: %+v", rr)
		}
		toks = append(toks, rr.Token)
	}
	st = c.do(newSink(), Request{Op: OpState, Key: "r", Owner: owner(12, 1)})
	if st.Status != wire.StatusSuccess || st.Kind != wire.KindRead || st.Readers != 3 || st.Holder != owner(12, 1) || st.Token != toks[2] || st.TTLLeftMs != 10000 {
		t.Fatalf("read state: %+v", st)
	}
	// A replica that is not the master refuses.
	g := wire.GroupOf(wire.KeyHash("ns", "k"), c.groups)
	m, _ := c.groupMaster(ID(g))
	for _, id := range c.peers {
		if id == m {
			continue
		}
		s := newSink()
		c.svc(id).Submit(&Request{Op: OpState, Namespace: "ns", Key: "k", Hash: wire.KeyHash("ns", "k"), ReqID: 1, Sink: s})
		if rr := s.response(t, 1); rr.Status != wire.StatusNoMaster {
			t.Fatalf("state at a follower: %+v", rr)
		}
	}
}

// TestWatchMovedOnStepDown: a master that loses its group while its
// clients' connections stay up tells every watch it drops EventMoved (a
// one-shot and a continuous one, on two keys and connections), so that
// their clients register them again at the new master; it keeps none of
// them in its by-connection index or usage counts, and the new master
// serves a watch registered again from the last token.
func TestWatchMovedOnStepDown(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	k := groupKeys(t, 0, c.groups, 8, 2) // one group, two workers
	g := c.groupOf(k[0])
	old := c.master("ns", k[0])
	ws, other := newSink(), newSink()
	for _, r := range []struct {
		s  *testSink
		rq Request
	}{
		{ws, watchReq(k[0], 1, 0, wire.FlagContinuous, 0)},
		{ws, watchReq(k[1], 2, 0, 0, time.Hour)},
		{other, watchReq(k[0], 1, 0, 0, 0)},
	} {
		if resp := c.do(r.s, r.rq); resp.Status != wire.StatusSuccess {
			t.Fatalf("watch %+v: %+v", r.rq, resp)
		}
	}
	c.takeOver(g, false)
	for _, w := range []struct {
		s   *testSink
		id  uint64
		key string
	}{{ws, 1, k[0]}, {ws, 2, k[1]}, {other, 1, k[0]}} {
		e := w.s.waitWatch(t, w.id, 1)[0]
		if e.Event != wire.EventMoved || e.Key != w.key || e.Token != 0 {
			t.Fatalf("watch %d on %s after its master stepped down: %+v, want EventMoved", w.id, w.key, e)
		}
	}
	ws.wait(t, "the old master's watch counts to empty", func() bool {
		var n int64
		for _, wk := range old.Group(ID(g)).workers {
			n += wk.nwatch.Load()
		}
		old.use.mu.Lock()
		defer old.use.mu.Unlock()
		return n == 0 && len(old.use.conns) == 0 && len(old.use.nss) == 0
	})
	// The client registers again at the new master, which reports the
	// next grant.
	if r := c.do(ws, watchReq(k[0], 1, 0, wire.FlagContinuous, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch again at the new master: %+v", r)
	}
	ra := c.do(newSink(), Request{Op: OpAcquire, Key: k[0], Owner: owner(1, 1), TTL: 5 * time.Second})
	if ra.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", ra)
	}
	wantEvent(t, ws.waitWatch(t, 1, 2)[1], wire.EventAcquired, ra.Token, owner(1, 1))
	if n := len(ws.watchEvents(2)); n != 1 {
		t.Fatalf("the one-shot watch had %d events after EventMoved, want none", n)
	}
}
