package group

import (
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// keepReq is a partial release of o's semaphore hold with token down to
// keep permits.
func keepReq(o wire.Owner, token uint64, keep uint32) Request {
	return Request{Op: OpRelease, Key: "sem", Owner: o, Token: token, Permits: keep}
}

// holdOf returns o's entry in State's holders of key (zero when none).
func holdOf(c *fakeCluster, key string, o wire.Owner) wire.LockInfo {
	for _, l := range c.state(key).Locks {
		if l.Holder == o {
			return l
		}
	}
	return wire.LockInfo{}
}

// TestSemaphorePartialRelease: a holder gives back some of its permits
// and keeps its token; a waiter that fits is granted by the same command;
// the kept permits still count against the next waiter; keeping more
// than held is refused with nothing changed; a retry is a no-op; after a
// master change the hold has the reduced count, renews with its token and
// is released whole, which grants the next waiter.
func TestSemaphorePartialRelease(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	a, w, w2 := newSink(), newSink(), newSink()
	ra := c.do(a, semReq(owner(1, 1), 3, 4))
	if ra.Status != wire.StatusSuccess {
		t.Fatalf("acquire 3 of 4: %+v", ra)
	}
	if r := c.do(w, semWait(owner(2, 1), 2, 4, 21)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait for 2: %+v", r)
	}
	if r := c.do(w2, semWait(owner(3, 1), 2, 4, 31)); r.Status != wire.StatusLockWait {
		t.Fatalf("second wait for 2: %+v", r)
	}
	// Keep 1 of 3: two permits go, the first waiter's 2 fit; the second
	// waiter's 2 would only fit beside A's kept permit if it were gone.
	if r := c.do(a, keepReq(owner(1, 1), ra.Token, 1)); r.Status != wire.StatusSuccess || r.Token != ra.Token || r.Permits != 1 {
		t.Fatalf("keep 1: %+v", r)
	}
	if g := w.granted(t, 21); g.Status != wire.StatusSuccess || g.Token <= ra.Token {
		t.Fatalf("waiter after the partial release: %+v", g)
	}
	st := c.state("sem")
	if h := holdOf(c, "sem", owner(1, 1)); st.InUse != 3 || st.QueueLen != 1 || h.Permits != 1 || h.Token != ra.Token {
		t.Fatalf("state after keeping 1: %+v, a's hold %+v", st, h)
	}
	// Keeping more than held: refused, nothing changes.
	if r := c.do(a, keepReq(owner(1, 1), ra.Token, 2)); r.Status != wire.StatusBadRequest || r.Permits != 1 {
		t.Fatalf("keep 2 of 1: %+v", r)
	}
	// A retry of the applied release: success, nothing changes.
	if r := c.do(a, keepReq(owner(1, 1), ra.Token, 1)); r.Status != wire.StatusSuccess || r.Token != ra.Token {
		t.Fatalf("retried keep 1: %+v", r)
	}
	// Another token: refused.
	if r := c.do(a, keepReq(owner(1, 1), ra.Token+1, 1)); r.Status != wire.StatusTokenError {
		t.Fatalf("keep with another token: %+v", r)
	}
	if st2 := c.state("sem"); st2.InUse != 3 || len(st2.Locks) != 2 {
		t.Fatalf("state after the refusals: %+v", st2)
	}
	// A new master has the reduced count from the replicated state.
	c.takeOver(wire.GroupOf(wire.KeyHash("ns", "sem"), c.groups), true)
	if h := holdOf(c, "sem", owner(1, 1)); h.Permits != 1 || h.Token != ra.Token {
		t.Fatalf("a's hold on the new master: %+v", h)
	}
	// The second waiter, told NO_MASTER by the old master, waits again.
	if g := w2.granted(t, 31); g.Status != wire.StatusNoMaster {
		t.Fatalf("second waiter at the master change: %+v", g)
	}
	if r := c.do(w2, semWait(owner(3, 1), 2, 4, 32)); r.Status != wire.StatusLockWait {
		t.Fatalf("second waiter on the new master: %+v", r)
	}
	if r := c.do(a, Request{Op: OpRenew, Key: "sem", Owner: owner(1, 1), Token: ra.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("renew on the new master: %+v", r)
	}
	if r := c.do(a, Request{Op: OpRelease, Key: "sem", Owner: owner(1, 1), Token: ra.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("full release: %+v", r)
	}
	// A's last permit frees room for the second waiter.
	if g := w2.granted(t, 32); g.Status != wire.StatusSuccess {
		t.Fatalf("second waiter after the full release: %+v", g)
	}
	if st3 := c.state("sem"); st3.InUse != 4 || len(st3.Locks) != 2 || holdOf(c, "sem", owner(1, 1)).Token != 0 {
		t.Fatalf("state after the full release: %+v", st3)
	}
}

// TestPartialReleaseOfLock: a partial release of a lock's hold is refused
// and the lock stays held.
func TestPartialReleaseOfLock(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	r := c.do(newSink(), Request{Op: OpAcquire, Key: "sem", Owner: owner(1, 1)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	if rr := c.do(newSink(), keepReq(owner(1, 1), r.Token, 1)); rr.Status != wire.StatusBadRequest {
		t.Fatalf("partial release of a lock: %+v", rr)
	}
	if st := c.state("sem"); st.Holder != owner(1, 1) || st.Token != r.Token {
		t.Fatalf("state: %+v", st)
	}
}

// TestKeepPermitsCommand: the permits to keep round-trip in the command
// tail; a release without them has no tail (the bytes of commands before
// partial releases); keep on another op, or 0, does not decode; the state
// machine refuses keeping more than held, unchanged.
func TestKeepPermitsCommand(t *testing.T) {
	t.Parallel()
	sk := fullKey("ns", "sem")
	full := command{op: opRelease, key: sk, owner: owner(1, 1), token: 9}
	if b := appendCommand(nil, &full); b[0] != byte(opRelease) {
		t.Fatalf("a full release has a tail: % x", b)
	}
	part := full
	part.keep = 2
	b := appendCommand(nil, &part)
	if len(b) > part.sizeHint() {
		t.Fatalf("%d bytes over the size hint %d", len(b), part.sizeHint())
	}
	if d, err := decodeCommand(b); err != nil || d.keep != 2 || d.op != opRelease {
		t.Fatalf("decode: %+v %v", d, err)
	}
	other := command{op: opRenew, key: sk, owner: owner(1, 1), token: 9, keep: 2}
	if _, err := decodeCommand(appendCommand(nil, &other)); err == nil {
		t.Fatal("a renew with permits to keep decoded")
	}
	// Flags then cmdKeepPermits with 0.
	zero := append(appendCommand(nil, &full), 0, 0, 0)
	zero[0] |= opHasTail
	zero[len(zero)-3] = cmdKeepPermits
	if _, err := decodeCommand(zero); err == nil {
		t.Fatalf("keep 0 decoded: % x", zero)
	}

	sm := NewStateMachine(1)
	kv := newMemKV()
	apply := func(c command) *outcome {
		res := make([]any, 1)
		sm.Apply(sm.applied+1, [][]byte{appendCommand(nil, &c)}, kv, res)
		return res[0].(*outcome)
	}
	acq := apply(command{op: opAcquire, key: sk, owner: owner(1, 1), kind: wire.KindSemaphore, ttlMs: 1000, permits: 2, limit: 5})
	if acq.status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", acq)
	}
	over := full
	over.token, over.keep = acq.token, 3
	if o := apply(over); o.status != wire.StatusBadRequest {
		t.Fatalf("keep 3 of 2: %+v", o)
	}
	part.token = acq.token
	for range 2 { // applied twice: the same hold
		if o := apply(part); o.status != wire.StatusSuccess || o.token != acq.token {
			t.Fatalf("keep 2 of 2: %+v", o)
		}
	}
	part.keep = 1
	for range 2 {
		if o := apply(part); o.status != wire.StatusSuccess {
			t.Fatalf("keep 1: %+v", o)
		}
	}
	sm.view(sk, func(l *lockRec) {
		if l.n() != 1 || l.permitsAt(0) != 1 || l.at(0).token != acq.token {
			t.Fatalf("record after keeping 1: %+v %+v", l, l.x)
		}
	})
}

// TestPartialReleaseWatched: a continuous watcher of a semaphore hears a
// holder's partial release as EventAcquired with the hold's token again
// (the hold changed; State gives its permits), then the grant it let in.
func TestPartialReleaseWatched(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	ws, a, w := newSink(), newSink(), newSink()
	if r := c.do(ws, Request{Op: OpWatch, Key: "sem", WatchID: 1, Flags: wire.FlagContinuous}); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	ra := c.do(a, semReq(owner(1, 1), 3, 4))
	if ra.Status != wire.StatusSuccess {
		t.Fatalf("acquire 3 of 4: %+v", ra)
	}
	wantEvent(t, ws.waitWatch(t, 1, 1)[0], wire.EventAcquired, ra.Token, owner(1, 1))
	if r := c.do(w, semWait(owner(2, 1), 2, 4, 21)); r.Status != wire.StatusLockWait {
		t.Fatalf("wait for 2: %+v", r)
	}
	if r := c.do(a, keepReq(owner(1, 1), ra.Token, 1)); r.Status != wire.StatusSuccess {
		t.Fatalf("keep 1: %+v", r)
	}
	g := w.granted(t, 21)
	evs := ws.waitWatch(t, 1, 3)
	wantEvent(t, evs[1], wire.EventAcquired, ra.Token, owner(1, 1))
	wantEvent(t, evs[2], wire.EventAcquired, g.Token, owner(2, 1))
	if h := holdOf(c, "sem", owner(1, 1)); h.Permits != 1 {
		t.Fatalf("a's hold after the partial release: %+v", h)
	}
}
