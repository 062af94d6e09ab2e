package group

import (
	"bytes"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// tryLock is a stranger's try-lock of key.
func tryLock(c lockCluster, key string, o wire.Owner) wire.Response {
	return c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: o, TTL: 10 * time.Second})
}

// wantDelayed checks that a try-lock of key is refused for a lock-delay
// with left to run, and that State says so.
func wantDelayed(t *testing.T, c lockCluster, key string, left time.Duration, when string) {
	t.Helper()
	r := tryLock(c, key, owner(77, 7))
	if r.Status != wire.StatusLockOccupied || !r.Holder.IsZero() || r.RetryAfterMs != uint32(left/time.Millisecond) || r.Msg != "lock-delay" {
		t.Fatalf("%s: try-lock %+v, want LOCK_OCCUPIED without a holder, RetryAfterMs %d", when, r, left/time.Millisecond)
	}
	if st := c.state(key); st.Status != wire.StatusLockDeleted || st.RetryAfterMs != uint32(left/time.Millisecond) {
		t.Fatalf("%s: state %+v, want LOCK_DELETED with RetryAfterMs %d", when, st, left/time.Millisecond)
	}
}

// delayRecords returns key's delay record on every replica of its group.
func delayRecords(c *fakeCluster, key string) []delayRec {
	full := fullKey("ns", key)
	var out []delayRec
	for _, r := range c.fgs[wire.GroupOf(wire.KeyHash("ns", key), c.groups)].replicas {
		d, _ := r.sm.delayOf(full)
		out = append(out, d)
	}
	return out
}

// TestLockDelayAfterExpiry: a hold with a lock-delay whose TTL runs out
// leaves its key ungrantable for exactly the delay, on the master's
// clock: a try-lock is LOCK_OCCUPIED with what is left in RetryAfterMs,
// the waiter queued before stays queued, and the moment the delay ends
// the waiter is granted (by a timer, not a poll). Every replica held the
// same delay record, and none is left. The waiter's own hold has no delay:
// when it expires the key is free at once.
func TestLockDelayAfterExpiry(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "printer"
	const ttl, delay = 2 * time.Second, 5 * time.Second
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: ttl, LockDelayMs: uint16(delay / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	w := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, w)
	fc.Advance(ttl) // the hold's deadline: it expires now
	if l := hs.push(t, "lost", isLost(r.Token)).(*wire.Lost); l.Event != wire.EventExpired {
		t.Fatalf("lost: %+v", l)
	}
	wantDelayed(t, c, key, delay, "when the hold expired")
	ds := delayRecords(c, key)
	for i, d := range ds {
		if d.ms != uint32(delay/time.Millisecond) || d.id == 0 || d != ds[0] {
			t.Fatalf("replica %d: delay record %+v (replica 1: %+v)", i+1, d, ds[0])
		}
	}
	if st := c.state(key); st.QueueLen != 1 {
		t.Fatalf("state during the delay: %+v, want the waiter queued", st)
	}
	fc.Advance(delay - time.Millisecond)
	wantDelayed(t, c, key, time.Millisecond, "a millisecond before the delay's end")
	if w.sink.count(isGranted(w.waitID)) != 0 {
		t.Fatal("the waiter was granted during the delay")
	}
	fc.Advance(time.Millisecond)
	g := w.sink.granted(t, w.waitID)
	if g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("granted at the delay's end: %+v (old token %d)", g, r.Token)
	}
	if st := c.state(key); st.Holder != w.owner || st.Token != g.Token || st.RetryAfterMs != 0 {
		t.Fatalf("state after the delay: %+v", st)
	}
	for i, d := range delayRecords(c, key) {
		if d != (delayRec{}) {
			t.Fatalf("replica %d still has delay record %+v", i+1, d)
		}
	}
	// The waiter's hold (no delay) expires: free at once.
	advanceUntil(t, fc, 100*time.Millisecond, "the waiter's hold to expire", freed(c, key))
	if r := tryLock(c, key, owner(3, 1)); r.Status != wire.StatusSuccess {
		t.Fatalf("try-lock after a hold without delay expired: %+v", r)
	}
}

// TestLockDelayNotAfterRelease: a release by the holder is voluntary: the
// key goes to its waiter, or to the next try-lock, at once.
func TestLockDelayNotAfterRelease(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "released"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Minute, LockDelayMs: 10000})
	w := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, w)
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	g := w.sink.granted(t, w.waitID)
	if g.Status != wire.StatusSuccess {
		t.Fatalf("waiter after a release: %+v", g)
	}
	if rr := c.do(w.sink, Request{Op: OpRelease, Key: key, Owner: w.owner, Token: g.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if r := tryLock(c, key, owner(3, 1)); r.Status != wire.StatusSuccess {
		t.Fatalf("try-lock after a release: %+v", r)
	}
	for i, d := range delayRecords(c, key) {
		if d != (delayRec{}) {
			t.Fatalf("replica %d has delay record %+v after releases", i+1, d)
		}
	}
	// A pass-on (the client's local queue) gives the new hold the
	// lock-delay its release names.
	const k2 = "handed"
	r2 := c.do(hs, Request{Op: OpAcquire, Key: k2, Owner: owner(1, 1), TTL: time.Minute})
	rr := c.do(hs, Request{Op: OpRelease, Key: k2, Owner: owner(1, 1), Token: r2.Token, PassOn: owner(1, 2), TTL: time.Minute, LockDelayMs: 700})
	if rr.Status != wire.StatusSuccess || rr.Holder != owner(1, 2) {
		t.Fatalf("release with a pass-on: %+v", rr)
	}
	sm := c.master("ns", k2).Group(Of(wire.KeyHash("ns", k2), c.groups)).StateMachine()
	if l := sm.get(fullKey("ns", k2)); l.n() != 1 || l.delayAt(0) != 700 {
		t.Fatalf("handed-off hold %+v, want a 700 ms lock-delay", l)
	}
}

// TestLockDelayAfterForceRelease: an operator's force-unlock is
// involuntary too: the holder hears EventRevoked, acknowledges with a
// release, and the key still waits out the hold's delay.
func TestLockDelayAfterForceRelease(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "stuck"
	const delay = 3 * time.Second
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour, LockDelayMs: uint16(delay / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	done := forceAsync(t.Context(), c.master("ns", key), key)
	hs.push(t, "Lost EventRevoked", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Token == r.Token && l.Event == wire.EventRevoked
	})
	// The holder acknowledges the revocation with a release: the hold
	// still ends involuntarily.
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("acknowledgement: %+v", rr)
	}
	if res := waitForce(t, done); res.err != nil || len(res.got) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", res.got, res.err)
	}
	wantDelayed(t, c, key, delay, "after the force-unlock")
	fc.Advance(delay)
	if r2 := tryLock(c, key, owner(3, 1)); r2.Status != wire.StatusSuccess || r2.Token <= r.Token {
		t.Fatalf("try-lock after the delay: %+v", r2)
	}
}

// TestLockDelayMasterChange: the delay is in the replicated state, and a
// new master, which cannot know when its predecessor started it, gives it
// in full from the moment it takes the group (the old master, which dies,
// had a second of it left).
func TestLockDelayMasterChange(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "failover"
	const delay = 4 * time.Second
	r := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Second, LockDelayMs: uint16(delay / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	fc.Advance(time.Second) // expired; the delay starts
	fc.Advance(delay - time.Second)
	wantDelayed(t, c, key, time.Second, "on the old master")
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	c.takeOver(g, true)
	wantDelayed(t, c, key, delay, "on the new master")
	fc.Advance(delay - time.Millisecond)
	wantDelayed(t, c, key, time.Millisecond, "on the new master, a millisecond before")
	fc.Advance(time.Millisecond)
	for i, d := range delayRecords(c, key) {
		if d != (delayRec{}) {
			t.Fatalf("replica %d still has delay record %+v after the delay", i+1, d)
		}
	}
	if r2 := tryLock(c, key, owner(3, 1)); r2.Status != wire.StatusSuccess || r2.Token <= r.Token {
		t.Fatalf("try-lock after the delay: %+v", r2)
	}
}

// TestLockDelayUndelayRetried: an opUndelay that is not chosen is proposed
// again shortly (not in a loop), and the waiter is granted once it is.
func TestLockDelayUndelayRetried(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "retry"
	r := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Second, LockDelayMs: 1000})
	w := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, w)
	fc.Advance(time.Second) // expired
	fg := c.fgs[wire.GroupOf(wire.KeyHash("ns", key), c.groups)]
	fg.mu.Lock()
	fg.reject = paxos.ErrOverloaded
	before := fg.submitted
	fg.mu.Unlock()
	fc.Advance(time.Second) // the delay's end: its opUndelay fails
	fg.mu.Lock()
	tries := fg.submitted - before
	fg.reject = nil
	fg.mu.Unlock()
	if tries != 1 {
		t.Fatalf("%d opUndelay proposals at the delay's end, want 1 (then a retry after %v)", tries, delayRetry)
	}
	if w.sink.count(isGranted(w.waitID)) != 0 {
		t.Fatal("granted although the opUndelay failed")
	}
	fc.Advance(delayRetry)
	if g := w.sink.granted(t, w.waitID); g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("granted after the retry: %+v", g)
	}
}

// TestLockDelayStateMachine: the state machine alone. A hold's delay is
// in its record (version 4, round trip); an expire of it records the
// delay and grants nothing, whatever the command says; an acquire by
// another owner is refused until an opUndelay naming the delay (a wrong
// id changes nothing) ends it and grants; a release starts no delay. The
// delay record survives a checkpoint and a Load, and is deleted from the
// keyspace when it ends.
func TestLockDelayStateMachine(t *testing.T) {
	t.Parallel()
	sm := NewStateMachine(4)
	kv := newMemKV()
	key := fullKey("ns", "k")
	do := func(inst uint64, c command) *outcome {
		t.Helper()
		b := appendCommand(nil, &c)
		dc, err := decodeCommand(b)
		if err != nil || dc.delayMs != c.delayMs {
			t.Fatalf("command %+v: decoded %+v, %v", c, dc, err)
		}
		res := make([]any, 1)
		sm.Apply(inst, [][]byte{b}, kv, res)
		return res[0].(*outcome)
	}
	a, b := owner(1, 1), owner(2, 1)
	o := do(1, command{op: opAcquire, key: key, owner: a, ttlMs: 1000, delayMs: 3000})
	if o.status != wire.StatusSuccess {
		t.Fatal(o.status)
	}
	l := sm.get(key)
	if l.delayAt(0) != 3000 {
		t.Fatalf("hold's delay %d", l.delayAt(0))
	}
	enc := encodeRec(nil, l)
	if enc[0] != delayRecVersion {
		t.Fatalf("record with a delay has version %d", enc[0])
	}
	if got, err := decodeRec(enc); err != nil || got.delayAt(0) != 3000 || got.at(0).token != o.token {
		t.Fatalf("version 4 record: %+v, %v", got, err)
	}
	tok := o.token
	o = do(2, command{op: opExpire, key: key, owner: a, token: tok, grants: []grant{{owner: b, ttlMs: 1000}}})
	if o.status != wire.StatusSuccess || o.delayMs != 3000 || len(o.grants) != 1 || o.grants[0] != 0 {
		t.Fatalf("expire: %+v", o)
	}
	d, ok := sm.delayOf(key)
	if !ok || d.ms != 3000 || d.id != sm.token(2) {
		t.Fatalf("delay record %+v %v", d, ok)
	}
	if o := do(3, command{op: opAcquire, key: key, owner: b, ttlMs: 1000}); o.status != wire.StatusLockOccupied {
		t.Fatalf("acquire during the delay: %v", o.status)
	}
	if o := do(4, command{op: opUndelay, key: key, token: d.id + 1, grants: []grant{{owner: b, ttlMs: 1000}}}); o.status != wire.StatusTokenError || o.grants[0] != 0 {
		t.Fatalf("undelay with a wrong id: %+v", o)
	}
	sm.Checkpoint(kv)
	if _, ok := kv.m[string(append([]byte{delayPrefix}, key...))]; !ok {
		t.Fatal("no delay record in the keyspace after a checkpoint")
	}
	re := NewStateMachine(3)
	if err := re.Load(kv, 4); err != nil {
		t.Fatal(err)
	}
	if d2, ok := re.delayOf(key); !ok || d2 != d {
		t.Fatalf("loaded delay record %+v %v, want %+v", d2, ok, d)
	}
	o = do(5, command{op: opUndelay, key: key, token: d.id, grants: []grant{{owner: b, ttlMs: 1000}}})
	if o.status != wire.StatusSuccess || o.grants[0] != sm.token(5) {
		t.Fatalf("undelay: %+v", o)
	}
	if _, ok := sm.delayOf(key); ok {
		t.Fatal("delay record left after the undelay")
	}
	sm.Checkpoint(kv)
	if _, ok := kv.m[string(append([]byte{delayPrefix}, key...))]; ok {
		t.Fatal("delay record left in the keyspace")
	}
	// A release starts no delay, and a hold's delay goes with it.
	if o := do(6, command{op: opAcquire, key: key, owner: b, ttlMs: 1000, delayMs: 500}); o.status != wire.StatusSuccess {
		t.Fatalf("reacquire with a delay: %v", o.status)
	}
	if o := do(7, command{op: opRelease, key: key, owner: b, token: sm.token(5)}); o.status != wire.StatusSuccess || o.delayMs != 0 {
		t.Fatalf("release: %+v", o)
	}
	if _, ok := sm.delayOf(key); ok {
		t.Fatal("a release started a delay")
	}
}

// TestLockDelayReaders: a reader's hold with a delay expires while
// another reader holds the key: the other keeps renewing and may
// reacquire, nobody new is granted until the delay ends, and a second
// expire keeps the longer delay.
func TestLockDelayReaders(t *testing.T) {
	t.Parallel()
	sm := NewStateMachine(1)
	kv := newMemKV()
	key := fullKey("ns", "rw")
	do := func(inst uint64, c command) *outcome {
		res := make([]any, 1)
		sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, kv, res)
		return res[0].(*outcome)
	}
	r1, r2, r3 := owner(1, 1), owner(2, 1), owner(3, 1)
	t1 := do(1, command{op: opAcquire, key: key, owner: r1, kind: wire.KindRead, ttlMs: 1000, delayMs: 2000}).token
	t2 := do(2, command{op: opAcquire, key: key, owner: r2, kind: wire.KindRead, ttlMs: 1000, delayMs: 500}).token
	if o := do(3, command{op: opExpire, key: key, owner: r1, token: t1}); o.status != wire.StatusSuccess || o.delayMs != 2000 {
		t.Fatalf("expire r1: %+v", o)
	}
	if o := do(4, command{op: opRenew, key: key, owner: r2, token: t2, ttlMs: 1000}); o.status != wire.StatusSuccess {
		t.Fatalf("renew by the remaining reader: %v", o.status)
	}
	if o := do(5, command{op: opAcquire, key: key, owner: r2, kind: wire.KindRead, ttlMs: 1000, delayMs: 500}); o.status != wire.StatusSuccess || o.token != t2 {
		t.Fatalf("reacquire by the remaining reader: %+v", o)
	}
	if o := do(6, command{op: opAcquire, key: key, owner: r3, kind: wire.KindRead, ttlMs: 1000}); o.status != wire.StatusLockOccupied {
		t.Fatalf("a new reader during the delay: %v", o.status)
	}
	if o := do(7, command{op: opExpire, key: key, owner: r2, token: t2}); o.status != wire.StatusSuccess || o.delayMs != 500 {
		t.Fatalf("expire r2: %+v", o)
	}
	if d, ok := sm.delayOf(key); !ok || d.ms != 2000 || d.id != sm.token(7) {
		t.Fatalf("delay after two expires: %+v %v, want 2000 ms with the second's id", d, ok)
	}
}

// TestLockDelayRecords: records and commands with delays round-trip
// (locks version 4, semaphores version 5); without delays they are
// encoded exactly as before (no delay flag, versions 1 to 3).
func TestLockDelayRecords(t *testing.T) {
	t.Parallel()
	sem := &lockRec{}
	sem.addSem(holder{owner: owner(1, 2), token: 7, ttlMs: 900, kind: wire.KindSemaphore}, "", 2, 5)
	sem.addSem(holder{owner: owner(3, 4), token: 8, ttlMs: 900, kind: wire.KindSemaphore}, "v", 1, 5)
	if v := encodeRec(nil, sem)[0]; v != semRecVersion {
		t.Fatalf("semaphore without delays: version %d", v)
	}
	sem.setDelay(1, 1500)
	enc := encodeRec(nil, sem)
	if enc[0] != semDelayRecVersion {
		t.Fatalf("semaphore with a delay: version %d", enc[0])
	}
	got, err := decodeRec(enc)
	if err != nil || got.n() != 2 || got.delayAt(0) != 0 || got.delayAt(1) != 1500 || got.permitsAt(0) != 2 || got.limit() != 5 || got.value(1) != "v" {
		t.Fatalf("version 5 record: %+v, %v", got, err)
	}
	got.remove(0)
	if got.delayAt(0) != 1500 {
		t.Fatalf("after removing the first hold the second's delay is %d", got.delayAt(0))
	}
	got.setDelay(0, 0)
	if got.x.delays != nil {
		t.Fatalf("delays %v left after clearing", got.x.delays)
	}
	if _, err := decodeRec([]byte{delayRecVersion, byte(wire.KindSemaphore), 1, 1, 1, 1, 1, 0, 0}); err == nil {
		t.Fatal("a semaphore in a version 4 record decoded")
	}
	plain := command{op: opRelease, key: "k", owner: owner(1, 1), token: 3, grants: []grant{{owner: owner(2, 1), ttlMs: 900}}}
	b := appendCommand(nil, &plain)
	if b[0]&opHasTail != 0 {
		t.Fatal("a command without delays or values has a tail")
	}
	plain.grants[0].delayMs = 700
	b2 := appendCommand(nil, &plain)
	c, err := decodeCommand(b2)
	if err != nil || c.grants[0].delayMs != 700 || c.delayMs != 0 {
		t.Fatalf("command with a grant's delay: %+v, %v", c, err)
	}
	if !bytes.Equal(appendCommand(nil, &c), b2) {
		t.Fatal("command with a delay does not re-encode the same")
	}
}

// TestLockDelayBackupRestore: a key's delay record and a hold's delay go
// through a backup and its restore.
func TestLockDelayBackupRestore(t *testing.T) {
	t.Parallel()
	st := openStore(t, t.TempDir())
	defer st.Close()
	sm := NewStateMachine(4)
	a, b := fullKey("ns", "freed"), fullKey("ns", "held")
	outs := applyCommitted(t, st, ID(0).ReplicaGroup(), sm, 3, []command{
		{op: opAcquire, key: a, owner: owner(1, 1), ttlMs: 1000, delayMs: 2500},
		{op: opAcquire, key: b, owner: owner(2, 1), ttlMs: 1000, delayMs: 800},
	})
	applyCommitted(t, st, ID(0).ReplicaGroup(), sm, 4, []command{{op: opExpire, key: a, owner: owner(1, 1), token: outs[0].token}})
	want, ok := sm.delayOf(a)
	if !ok {
		t.Fatal("no delay after the expire")
	}
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
	if d, ok := got.delayOf(a); !ok || d != want {
		t.Fatalf("restored delay %+v %v, want %+v", d, ok, want)
	}
	if l := got.get(b); l.n() != 1 || l.delayAt(0) != 800 {
		t.Fatalf("restored hold %+v", l)
	}
}

// TestStateTokenCheck: a state query with a token reports the hold with
// that token (a reader that is not the first included); a token no hold
// has gets the plain answer, whose token is not the one asked about.
func TestStateTokenCheck(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "shared"
	r1 := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), Kind: wire.KindRead, TTL: 10 * time.Second})
	fc.Advance(time.Second)
	r2 := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), Kind: wire.KindRead, TTL: 20 * time.Second, Value: "two"})
	if r1.Status != wire.StatusSuccess || r2.Status != wire.StatusSuccess || r1.Token == r2.Token {
		t.Fatalf("readers: %+v %+v", r1, r2)
	}
	check := func(tok uint64) wire.Response {
		return c.do(newSink(), Request{Op: OpState, Key: key, Token: tok})
	}
	if st := check(r2.Token); st.Status != wire.StatusSuccess || st.Token != r2.Token || st.Holder != owner(2, 1) || st.Value != "two" || st.TTLLeftMs != 20000 {
		t.Fatalf("check of the second reader's token: %+v", st)
	}
	if st := check(r1.Token); st.Token != r1.Token || st.Holder != owner(1, 1) || st.TTLLeftMs != 9000 {
		t.Fatalf("check of the first reader's token: %+v", st)
	}
	if st := check(r2.Token + 1); st.Status != wire.StatusSuccess || st.Token == r2.Token+1 {
		t.Fatalf("check of a token no hold has: %+v", st)
	}
	if st := check(0); st.Token != r1.Token {
		t.Fatalf("plain state: %+v", st)
	}
	if st := c.do(newSink(), Request{Op: OpState, Key: "free", Token: r1.Token}); st.Status != wire.StatusLockDeleted {
		t.Fatalf("check on a free key: %+v", st)
	}
}

// TestLockDelayEndsAfterChangeInFlight: when the delay ends while a change
// of the key is in flight (another reader's renew), it is ended once that
// change is applied, and the waiting writer gets the key when the last
// reader releases.
func TestLockDelayEndsAfterChangeInFlight(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "busy"
	r1 := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), Kind: wire.KindRead, TTL: time.Second, LockDelayMs: 1000})
	rs := newSink()
	r2 := c.do(rs, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), Kind: wire.KindRead, TTL: time.Hour})
	if r1.Status != wire.StatusSuccess || r2.Status != wire.StatusSuccess {
		t.Fatalf("readers: %+v %+v", r1, r2)
	}
	w := &waiterSpec{owner: owner(3, 1), kind: wire.KindWrite, waitID: 3}
	enqueue(t, c, key, w)
	fc.Advance(time.Second) // r1 expires: the delay starts
	if ds := delayRecords(c, key); ds[0].ms != 1000 {
		t.Fatalf("delay record %+v", ds[0])
	}
	fg := c.fgs[wire.GroupOf(wire.KeyHash("ns", key), c.groups)]
	fg.mu.Lock()
	fg.auto = false
	fg.mu.Unlock()
	renew := Request{Op: OpRenew, Namespace: "ns", Key: key, Hash: wire.KeyHash("ns", key), Owner: owner(2, 1), Token: r2.Token, ReqID: 1 << 40, Sink: rs}
	c.master("ns", key).Submit(&renew) // held: the key is busy
	fc.Advance(time.Second)            // the delay's end, with the renew in flight
	if n := fg.pending(); n != 1 {
		t.Fatalf("%d proposals held at the delay's end, want the renew alone", n)
	}
	fg.mu.Lock()
	fg.auto = true
	fg.mu.Unlock()
	fg.chooseAll() // the renew, then the delay's end it lets go
	if st := rs.response(t, renew.ReqID); st.Status != wire.StatusSuccess {
		t.Fatalf("renew: %+v", st)
	}
	for i, d := range delayRecords(c, key) {
		if d != (delayRec{}) {
			t.Fatalf("replica %d still has delay record %+v", i+1, d)
		}
	}
	fc.Advance(delayRetry) // the timer's second look finds nothing to do
	if rr := c.do(rs, Request{Op: OpRelease, Key: key, Owner: owner(2, 1), Token: r2.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if g := w.sink.granted(t, w.waitID); g.Status != wire.StatusSuccess {
		t.Fatalf("writer: %+v", g)
	}
}
