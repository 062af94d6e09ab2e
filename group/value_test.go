package group

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/paxlock/paxlock/client/wire"
)

// TestHeldKeyWithoutValueDoesNotGrow: a held key's record stays one
// object of at most 48 bytes when its hold has no value (1M held locks
// per node depend on it); a value lives out of line and goes with the
// hold.
func TestHeldKeyWithoutValueDoesNotGrow(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(lockRec{}); n > 48 {
		t.Fatalf("lockRec is %d bytes, want at most 48", n)
	}
	sm := NewStateMachine(1)
	kv := newMemKV()
	key := fullKey("ns", "k")
	do := func(inst uint64, c command) *outcome {
		res := make([]any, 1)
		sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, kv, res)
		return res[0].(*outcome)
	}
	o := do(1, command{op: opAcquire, key: key, owner: owner(1, 1), ttlMs: 1000})
	if l := sm.get(key); o.status != wire.StatusSuccess || l.x != nil {
		t.Fatalf("acquire without value: %v, out-of-line part %+v", o.status, l.x)
	}
	do(2, command{op: opRenew, key: key, owner: owner(1, 1), token: o.token, setValue: true, value: "host=a"})
	if l := sm.get(key); l.value(0) != "host=a" {
		t.Fatalf("value after renew: %q", l.value(0))
	}
	do(3, command{op: opRenew, key: key, owner: owner(1, 1), token: o.token, ttlMs: 2000})
	if l := sm.get(key); l.value(0) != "host=a" {
		t.Fatalf("a renew without setValue changed the value to %q", l.value(0))
	}
	do(4, command{op: opRenew, key: key, owner: owner(1, 1), token: o.token, setValue: true})
	if l := sm.get(key); l.value(0) != "" || l.x != nil {
		t.Fatalf("cleared value: %q, out-of-line part %+v", l.value(0), l.x)
	}
}

// TestLockRecordVersions: a record without values is encoded as before
// (version 1, so checkpoints written by older nodes and by this one
// agree), one with values as version 2; both load.
func TestLockRecordVersions(t *testing.T) {
	t.Parallel()
	l := &lockRec{}
	l.add(holder{owner: owner(1, 2), token: 7, ttlMs: 900, kind: wire.KindRead}, "")
	l.add(holder{owner: owner(3, 4), token: 8, ttlMs: 800, kind: wire.KindRead}, "")
	v1 := encodeRec(nil, l)
	// The version 1 layout, written out by hand.
	want := []byte{1, byte(wire.KindRead), 2, 1, 2, 7, 0x84, 0x07, 3, 4, 8, 0xa0, 0x06}
	if !bytes.Equal(v1, want) {
		t.Fatalf("record without values: % x, want % x", v1, want)
	}
	got, err := decodeRec(want)
	if err != nil || got.n() != 2 || got.at(1).token != 8 || got.value(1) != "" {
		t.Fatalf("version 1 record: %+v %v", got, err)
	}
	l.setValue(1, "reader two")
	v2 := encodeRec(nil, l)
	if v2[0] != 2 {
		t.Fatalf("record with a value has version %d", v2[0])
	}
	got, err = decodeRec(v2)
	if err != nil || got.n() != 2 || got.value(0) != "" || got.value(1) != "reader two" {
		t.Fatalf("version 2 record: %+v %v", got, err)
	}
	// Removing the first hold moves the second's value with it.
	got.remove(0)
	if got.n() != 1 || got.at(0).token != 8 || got.value(0) != "reader two" {
		t.Fatalf("after remove: %+v value %q", got, got.value(0))
	}
	if _, err := decodeRec(append([]byte{2, 0, 1, 1, 1, 1, 1}, appendValue(nil, strings.Repeat("x", wire.MaxValueLen+1))...)); err == nil {
		t.Fatal("a record with an oversized value decoded")
	}
}

// FuzzDecodeCommand: any bytes either fail to decode or decode to a
// command that re-encodes to a command decoding the same.
func FuzzDecodeCommand(f *testing.F) {
	g := newCmdGen(7, newModel())
	for range 32 {
		c := g.next(g.keys[g.r.IntN(len(g.keys))])
		f.Add(appendCommand(nil, &c))
	}
	// Semaphore commands: an acquire, a release granting two waiters, a
	// total's change.
	sk := fullKey("a", "s0")
	f.Add(appendCommand(nil, &command{op: opAcquire, key: sk, owner: owner(1, 1), kind: wire.KindSemaphore, ttlMs: 900, permits: 2, limit: 5}))
	f.Add(appendCommand(nil, &command{op: opRelease, key: sk, owner: owner(1, 1), token: 3, grants: []grant{
		{owner: owner(2, 1), kind: wire.KindSemaphore, ttlMs: 900, permits: 1, limit: 5, value: "v"},
		{owner: owner(3, 1), kind: wire.KindSemaphore, ttlMs: 900, permits: 3, limit: 5}}}))
	f.Add(appendCommand(nil, &command{op: opSetPermits, key: sk, kind: wire.KindSemaphore, limit: 7}))
	// Lock-delays: an acquire with one, an opUndelay granting a waiter
	// that asked for one.
	f.Add(appendCommand(nil, &command{op: opAcquire, key: sk, owner: owner(1, 1), ttlMs: 900, delayMs: 5000}))
	f.Add(appendCommand(nil, &command{op: opUndelay, key: sk, token: 7, grants: []grant{{owner: owner(2, 1), ttlMs: 900, delayMs: 100}}}))
	// Maximum hold times: an acquire with one, a release granting a
	// waiter with one and a lock-delay.
	f.Add(appendCommand(nil, &command{op: opAcquire, key: sk, owner: owner(1, 1), ttlMs: 900, maxHoldMs: 60000}))
	f.Add(appendCommand(nil, &command{op: opRelease, key: sk, owner: owner(1, 1), token: 3, grants: []grant{{owner: owner(2, 1), ttlMs: 900, delayMs: 100, maxHoldMs: 5000}}}))
	// A partial release keeping 2 permits, granting a waiter.
	f.Add(appendCommand(nil, &command{op: opRelease, key: sk, owner: owner(1, 1), token: 3, keep: 2, grants: []grant{
		{owner: owner(2, 1), kind: wire.KindSemaphore, ttlMs: 900, permits: 1, limit: 5}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCommand(b)
		if err != nil {
			return
		}
		b2 := appendCommand(nil, &c)
		c2, err := decodeCommand(b2)
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		if !bytes.Equal(appendCommand(nil, &c2), b2) {
			t.Fatal("command encoding not stable")
		}
		if len(c.value) > wire.MaxValueLen {
			t.Fatalf("decoded a value of %d bytes", len(c.value))
		}
	})
}

// FuzzDecodeRec: any bytes either fail to decode or give a record whose
// encoding decodes to the same holds and values.
func FuzzDecodeRec(f *testing.F) {
	l := &lockRec{}
	l.add(holder{owner: owner(1, 2), token: 7, ttlMs: 900}, "v")
	f.Add(encodeRec(nil, l))
	f.Add([]byte{1, 0, 1, 1, 2, 3, 4})
	sem := &lockRec{}
	sem.addSem(holder{owner: owner(1, 2), token: 7, ttlMs: 900, kind: wire.KindSemaphore}, "", 2, 5)
	sem.addSem(holder{owner: owner(3, 4), token: 8, ttlMs: 900, kind: wire.KindSemaphore}, "v", 1, 5)
	f.Add(encodeRec(nil, sem))
	sem.setDelay(1, 1500)
	f.Add(encodeRec(nil, sem)) // version 5
	l.setDelay(0, 2000)
	f.Add(encodeRec(nil, l)) // version 4
	l.setMaxHold(0, 60000)
	f.Add(encodeRec(nil, l)) // version 6
	sem.setMaxHold(0, 5000)
	f.Add(encodeRec(nil, sem)) // version 7
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeRec(b)
		if err != nil {
			return
		}
		l2, err := decodeRec(encodeRec(nil, l))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if l2.n() != l.n() {
			t.Fatalf("%d holds became %d", l.n(), l2.n())
		}
		for i := range l.n() {
			a, b := *l.at(i), *l2.at(i)
			if a.owner != b.owner || a.token != b.token || a.ttlMs != b.ttlMs || l.value(i) != l2.value(i) ||
				l.permitsAt(i) != l2.permitsAt(i) || l.limit() != l2.limit() || l.kind() != l2.kind() || l.delayAt(i) != l2.delayAt(i) ||
				l.maxHoldAt(i) != l2.maxHoldAt(i) {
				t.Fatalf("hold %d: %+v %q became %+v %q", i, a, l.value(i), b, l2.value(i))
			}
		}
	})
}

// TestHolderValueServed: the value an acquire attaches comes back in
// State, in a contender's LOCK_OCCUPIED and in watch events; a renew that
// sets it tells watchers (same token), changed or not; a waiter's value travels with its
// grant; a master change keeps it.
func TestHolderValueServed(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "v"
	ws := newSink()
	if r := c.do(ws, watchReq(key, 1, 0, wire.FlagContinuous, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	a, b := newSink(), newSink()
	ra := c.do(a, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 5 * time.Second, Value: "host=a pid=1"})
	if ra.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", ra)
	}
	if ev := ws.waitWatch(t, 1, 1)[0]; ev.Value != "host=a pid=1" {
		t.Fatalf("watch event value %q", ev.Value)
	}
	if r := c.state(key); r.Value != "host=a pid=1" || r.Token != ra.Token {
		t.Fatalf("state: %+v", r)
	}
	if r := c.do(b, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), TTL: 5 * time.Second}); r.Status != wire.StatusLockOccupied || r.Value != "host=a pid=1" {
		t.Fatalf("contender: %+v", r)
	}
	// A renew that sets a value is an event with the same token, even
	// when the value did not change (clients drop a repeat; see
	// worker.renew for why the master tells anyway).
	if r := c.do(a, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: ra.Token, SetValue: true, Value: "host=a pid=1"}); r.Status != wire.StatusSuccess {
		t.Fatalf("renew: %+v", r)
	}
	if r := c.do(a, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: ra.Token, SetValue: true, Value: "step 2"}); r.Status != wire.StatusSuccess {
		t.Fatalf("renew: %+v", r)
	}
	evs := ws.waitWatch(t, 1, 3)
	if ev := evs[1]; ev.Event != wire.EventAcquired || ev.Token != ra.Token || ev.Value != "host=a pid=1" {
		t.Fatalf("same-value renew event %+v", ev)
	}
	if ev := evs[2]; ev.Event != wire.EventAcquired || ev.Token != ra.Token || ev.Value != "step 2" {
		t.Fatalf("value change event %+v", ev)
	}
	// The value survives a master change (it is replicated).
	c.takeOver(wire.GroupOf(wire.KeyHash("ns", key), c.groups), false)
	if r := c.state(key); r.Value != "step 2" {
		t.Fatalf("state after master change: %+v", r)
	}
	// A waiter's value goes with its grant.
	if r := c.do(b, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), MaxWait: -1, WaitID: 9, TTL: 5 * time.Second, Value: "b"}); r.Status != wire.StatusLockWait {
		t.Fatalf("waiter: %+v", r)
	}
	if r := c.do(a, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: ra.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	gb := b.granted(t, 9)
	if r := c.state(key); r.Value != "b" || r.Token != gb.Token {
		t.Fatalf("state after the grant: %+v", r)
	}
}
