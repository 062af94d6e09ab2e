package group

import (
	"bytes"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// renewHold renews owner o's hold with token on key, which must succeed.
func renewHold(t *testing.T, c *fakeCluster, s *testSink, key string, o wire.Owner, token uint64, ttl time.Duration) {
	t.Helper()
	if r := c.do(s, Request{Op: OpRenew, Key: key, Owner: o, Token: token, TTL: ttl}); r.Status != wire.StatusSuccess {
		t.Fatalf("renew: %+v", r)
	}
}

// TestMaxHoldEndsRenewedHold: a hold with a maximum hold time that keeps
// renewing ends exactly that long after its grant on the master's clock,
// not a millisecond earlier: renewals do not extend it. The holder is
// pushed Lost EventHoldLimit, a watcher hears EventHoldLimit, the waiter
// is granted in the same command, and the hold-limit counter counts it
// (not as an expiry).
func TestMaxHoldEndsRenewedHold(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	obs := &countingObserver{}
	c := newFakeCluster(t, 3, Config{Clock: fc, Observer: obs})
	const key = "stuck"
	const ttl, maxHold = 2 * time.Second, 5 * time.Second
	hs := newSink()
	a := owner(1, 1)
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: a, TTL: ttl, MaxHoldMs: uint32(maxHold / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	ws := newSink()
	if wr := c.do(ws, watchReq(key, 5, r.Token, wire.FlagContinuous, 0)); wr.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", wr)
	}
	w := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, w)
	for range 3 { // renewed at 1.5 s, 3 s and 4.5 s: each would carry it past 5 s
		fc.Advance(1500 * time.Millisecond)
		renewHold(t, c, hs, key, a, r.Token, ttl)
	}
	if st := c.state(key); st.Holder != a || st.TTLLeftMs != 500 {
		t.Fatalf("state after the last renewal: %+v, want the hold with 500 ms left (its limit)", st)
	}
	fc.Advance(499 * time.Millisecond)
	if hs.count(isLost(r.Token)) != 0 || w.sink.count(isGranted(w.waitID)) != 0 {
		t.Fatal("the hold ended before its maximum hold time")
	}
	fc.Advance(time.Millisecond)
	if l := hs.push(t, "lost", isLost(r.Token)).(*wire.Lost); l.Event != wire.EventHoldLimit {
		t.Fatalf("lost: %+v, want EventHoldLimit", l)
	}
	g := w.sink.granted(t, w.waitID)
	if g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("waiter at the hold limit: %+v", g)
	}
	evs := ws.waitWatch(t, 5, 2)
	if evs[0].Event != wire.EventHoldLimit || evs[1].Event != wire.EventAcquired {
		t.Fatalf("watch events %+v, want hold-limit then acquired", evs)
	}
	if rr := c.do(hs, Request{Op: OpRenew, Key: key, Owner: a, Token: r.Token, TTL: ttl}); rr.Status == wire.StatusSuccess {
		t.Fatalf("renew after the hold limit: %+v", rr)
	}
	obs.mu.Lock()
	limited, expired := obs.counts[StatHoldLimit], obs.counts[StatExpiry]
	obs.mu.Unlock()
	if limited != 1 || expired != 0 {
		t.Fatalf("counted %d hold-limit ends and %d expiries, want 1 and 0", limited, expired)
	}
}

// TestMaxHoldLockDelayAndTTL: a hold-limit end is involuntary, so the
// hold's lock-delay applies; and a bound below the server's TTL (the
// acquire asked for the default) is raised to the TTL.
func TestMaxHoldLockDelayAndTTL(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc, DefaultTTL: 3 * time.Second})
	const key = "delayed"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), MaxHoldMs: 1000, LockDelayMs: 2000})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	fc.Advance(2999 * time.Millisecond)
	if hs.count(isLost(r.Token)) != 0 {
		t.Fatal("the hold ended before its TTL, to which its bound is raised")
	}
	fc.Advance(time.Millisecond)
	if l := hs.push(t, "lost", isLost(r.Token)).(*wire.Lost); l.Event != wire.EventHoldLimit {
		t.Fatalf("lost: %+v", l)
	}
	wantDelayed(t, c, key, 2*time.Second, "after the hold limit")
}

// TestMaxHoldMasterChange: the bound is replicated, its count is not: a
// new master counts a full bound from its takeover, whatever the old one
// had counted, and ends the hold then, though it keeps renewing.
func TestMaxHoldMasterChange(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "failover-hold"
	const ttl, maxHold = time.Second, 4 * time.Second
	hs := newSink()
	a := owner(1, 1)
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: a, TTL: ttl, MaxHoldMs: uint32(maxHold / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	for range 3 { // 2.7 s of the 4 s counted by the old master
		fc.Advance(900 * time.Millisecond)
		renewHold(t, c, hs, key, a, r.Token, ttl)
	}
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	c.takeOver(g, true)
	for range 4 { // 3.6 s on the new master: past the old one's limit
		fc.Advance(900 * time.Millisecond)
		renewHold(t, c, hs, key, a, r.Token, ttl)
	}
	if st := c.state(key); st.Holder != a || st.TTLLeftMs != 400 {
		t.Fatalf("state on the new master: %+v, want the hold with 400 ms to its limit", st)
	}
	fc.Advance(399 * time.Millisecond)
	if hs.count(isLost(r.Token)) != 0 {
		t.Fatal("the new master ended the hold before a full bound from its takeover")
	}
	fc.Advance(time.Millisecond)
	if l := hs.push(t, "lost", isLost(r.Token)).(*wire.Lost); l.Event != wire.EventHoldLimit {
		t.Fatalf("lost: %+v", l)
	}
	if r2 := tryLock(c, key, owner(3, 1)); r2.Status != wire.StatusSuccess {
		t.Fatalf("try-lock after the hold limit: %+v", r2)
	}
}

// TestMaxHoldRecords: a hold's bound is in its record (versions 6 and 7,
// round trip, through a checkpoint's encoding) and in the command tail
// (bit 4); records and commands without one are encoded as before.
func TestMaxHoldRecords(t *testing.T) {
	t.Parallel()
	l := &lockRec{}
	l.add(holder{owner: owner(1, 2), token: 7, ttlMs: 900, kind: wire.KindRead}, "")
	l.add(holder{owner: owner(3, 4), token: 8, ttlMs: 900, kind: wire.KindRead}, "v")
	if v := encodeRec(nil, l)[0]; v != 2 {
		t.Fatalf("record without bounds: version %d", v)
	}
	l.setMaxHold(1, 60000)
	enc := encodeRec(nil, l)
	if enc[0] != maxHoldRecVersion {
		t.Fatalf("record with a bound: version %d", enc[0])
	}
	got, err := decodeRec(enc)
	if err != nil || got.n() != 2 || got.maxHoldAt(0) != 0 || got.maxHoldAt(1) != 60000 || got.value(1) != "v" {
		t.Fatalf("version 6 record: %+v, %v", got, err)
	}
	got.remove(0)
	if got.maxHoldAt(0) != 60000 {
		t.Fatalf("after removing the first hold the second's bound is %d", got.maxHoldAt(0))
	}
	got.setMaxHold(0, 0)
	if got.x != nil && got.x.maxHolds != nil {
		t.Fatalf("bounds %v left after clearing", got.x.maxHolds)
	}
	sem := &lockRec{}
	sem.addSem(holder{owner: owner(1, 2), token: 7, ttlMs: 900, kind: wire.KindSemaphore}, "", 2, 5)
	sem.setMaxHold(0, 5000)
	sem.setDelay(0, 300)
	enc = encodeRec(nil, sem)
	if enc[0] != semMaxHoldRecVersion {
		t.Fatalf("semaphore with a bound: version %d", enc[0])
	}
	if s, err := decodeRec(enc); err != nil || s.maxHoldAt(0) != 5000 || s.delayAt(0) != 300 || s.permitsAt(0) != 2 || s.limit() != 5 {
		t.Fatalf("version 7 record: %+v, %v", s, err)
	}
	bad := &lockRec{}
	bad.add(holder{owner: owner(1, 1), token: 1, ttlMs: 1, kind: wire.KindExclusive}, "")
	bad.setMaxHold(0, wire.MaxHoldLimitMs+1)
	if _, err := decodeRec(encodeRec(nil, bad)); err == nil {
		t.Fatal("a record with a bound over the limit decoded")
	}
	plain := command{op: opAcquire, key: "k", owner: owner(1, 1), ttlMs: 900, grants: []grant{{owner: owner(2, 1), ttlMs: 900}}}
	if b := appendCommand(nil, &plain); b[0]&opHasTail != 0 {
		t.Fatal("a command without bounds or values has a tail")
	}
	plain.maxHoldMs = 4000
	plain.grants[0].maxHoldMs = 7000
	b := appendCommand(nil, &plain)
	c, err := decodeCommand(b)
	if err != nil || c.maxHoldMs != 4000 || c.grants[0].maxHoldMs != 7000 || c.delayMs != 0 {
		t.Fatalf("command with bounds: %+v, %v", c, err)
	}
	if !bytes.Equal(appendCommand(nil, &c), b) {
		t.Fatal("command with bounds does not re-encode the same")
	}
	if len(b) > plain.sizeHint() {
		t.Fatalf("command of %d bytes, size hint %d", len(b), plain.sizeHint())
	}
	plain.grants[0].maxHoldMs = wire.MaxHoldLimitMs + 1
	if _, err := decodeCommand(appendCommand(nil, &plain)); err == nil {
		t.Fatal("a command with a bound over the limit decoded")
	}
}

// TestMaxHoldBackupRestore: a hold's bound goes through a backup and its
// restore.
func TestMaxHoldBackupRestore(t *testing.T) {
	t.Parallel()
	st := openStore(t, t.TempDir())
	defer st.Close()
	sm := NewStateMachine(4)
	k := fullKey("ns", "bounded")
	applyCommitted(t, st, ID(0).ReplicaGroup(), sm, 3, []command{{op: opAcquire, key: k, owner: owner(1, 1), ttlMs: 1000, maxHoldMs: 9000}})
	raw := writeBackup(t, st, 1)
	dst := openStore(t, t.TempDir())
	defer dst.Close()
	if _, err := RestoreBackup(bytes.NewReader(raw), dst); err != nil {
		t.Fatal(err)
	}
	got := NewStateMachine(4)
	if err := got.Load(dst.SMReader(ID(0).ReplicaGroup()), RestoredApplied); err != nil {
		t.Fatal(err)
	}
	if l := got.get(k); l.n() != 1 || l.maxHoldAt(0) != 9000 {
		t.Fatalf("restored hold %+v", l)
	}
}

// TestLongHolds: Service.LongHolds counts the holds its master has served
// longer than the threshold, and none with a threshold of 0.
func TestLongHolds(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 1, Config{Clock: fc, Groups: 2})
	hs := newSink()
	old := c.do(hs, Request{Op: OpAcquire, Key: "old", Owner: owner(1, 1), TTL: time.Hour})
	fc.Advance(10 * time.Minute)
	young := c.do(hs, Request{Op: OpAcquire, Key: "young", Owner: owner(1, 2), TTL: time.Hour})
	if old.Status != wire.StatusSuccess || young.Status != wire.StatusSuccess {
		t.Fatalf("acquires: %+v %+v", old, young)
	}
	fc.Advance(time.Minute)
	svc := c.svc(1)
	for _, tc := range []struct {
		threshold time.Duration
		want      int
	}{{0, 0}, {10 * time.Minute, 1}, {11*time.Minute - time.Millisecond, 1}, {30 * time.Second, 2}, {time.Hour, 0}} {
		if n, err := svc.LongHolds(t.Context(), tc.threshold); err != nil || n != tc.want {
			t.Fatalf("LongHolds(%v) = %d, %v; want %d", tc.threshold, n, err, tc.want)
		}
	}
}
