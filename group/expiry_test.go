package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// probeHeld checks, as a barrier behind everything the clock fired, that
// key is still held: a try-lock by a stranger must be refused.
func probeHeld(t *testing.T, c lockCluster, key, when string) {
	t.Helper()
	r := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(999, 999), TTL: time.Second})
	if r.Status != wire.StatusLockOccupied {
		t.Fatalf("%s: key %q was free (%+v)", when, key, r)
	}
}

func freed(c lockCluster, key string) func() bool {
	return func() bool { return c.state(key).Status == wire.StatusLockDeleted }
}

// TestNoExpiryBeforeTTL: a lock is never freed before its TTL has run
// from the last acknowledged acquire or renew; once it has, it is freed
// and its holder told.
func TestNoExpiryBeforeTTL(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "ttl"
	const ttl = 10 * time.Second
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: ttl})
	if r.Status != wire.StatusSuccess || r.TTLLeftMs != uint32(ttl/time.Millisecond) {
		t.Fatalf("acquire: %+v", r)
	}
	fc.Advance(ttl - time.Millisecond)
	probeHeld(t, c, key, "just before the acquire's TTL")
	if st := c.state(key); st.TTLLeftMs != 1 {
		t.Fatalf("TTL left %dms, want 1", st.TTLLeftMs)
	}
	// Renew keeping the TTL, then with a new one.
	if rr := c.do(hs, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess || rr.TTLLeftMs != uint32(ttl/time.Millisecond) {
		t.Fatalf("renew: %+v", rr)
	}
	fc.Advance(ttl - time.Millisecond)
	probeHeld(t, c, key, "just before the first renewal's TTL")
	if rr := c.do(hs, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: r.Token, TTL: 2 * ttl}); rr.Status != wire.StatusSuccess || rr.TTLLeftMs != uint32(2*ttl/time.Millisecond) {
		t.Fatalf("renew: %+v", rr)
	}
	fc.Advance(2*ttl - time.Millisecond)
	probeHeld(t, c, key, "just before the second renewal's TTL")
	// A reacquire by the holder refreshes the TTL too.
	if rr := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: ttl}); rr.Status != wire.StatusSuccess || rr.Token != r.Token {
		t.Fatalf("reacquire: %+v", rr)
	}
	fc.Advance(ttl - time.Millisecond)
	probeHeld(t, c, key, "just before the reacquire's TTL")
	if hs.count(isLost(r.Token)) != 0 {
		t.Fatal("holder told it lost the lock before its TTL")
	}
	// Past the TTL: freed, holder told, and the next grant has a higher
	// token.
	advanceUntil(t, fc, 5*time.Millisecond, "expiry", freed(c, key))
	l := hs.push(t, "lost", isLost(r.Token)).(*wire.Lost)
	if l.Event != wire.EventExpired || l.Owner != owner(1, 1) || l.Key != key {
		t.Fatalf("lost: %+v", l)
	}
	if rr := c.do(hs, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusLockDeleted {
		t.Fatalf("renew after expiry: %+v", rr)
	}
	if rr := c.do(newSink(), Request{Op: OpAcquire, Key: key, Owner: owner(2, 1)}); rr.Status != wire.StatusSuccess || rr.Token <= r.Token {
		t.Fatalf("acquire after expiry: %+v (old token %d)", rr, r.Token)
	}
}

// TestVanishedHolderFreed (I7): a holder that never renews (its
// connection gone) loses the lock after its TTL, and the next waiter gets
// it.
func TestVanishedHolderFreed(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "gone"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: 5 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	ws := newSink()
	if rr := c.do(ws, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), MaxWait: -1, WaitID: 7}); rr.Status != wire.StatusLockWait {
		t.Fatalf("waiter: %+v", rr)
	}
	// The holder's connection closes: its waits and watches go, its lock
	// stays until the TTL runs out.
	c.master("ns", key).ForgetClient(1, hs)
	fc.Advance(5*time.Second - time.Millisecond)
	probeHeld(t, c, key, "before the TTL")
	advanceUntil(t, fc, 5*time.Millisecond, "grant to the waiter", func() bool { return ws.count(isGranted(7)) > 0 })
	g := ws.granted(t, 7)
	if g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("granted: %+v", g)
	}
	if st := c.state(key); st.Holder != owner(2, 1) || st.Token != g.Token {
		t.Fatalf("state: %+v", st)
	}
	if hs.count(isLost(r.Token)) != 0 {
		t.Fatal("a forgotten connection was pushed to")
	}
}

// TestReadersExpireSeparately: readers that got the lock in one grant
// share a token but not a deadline: a renewing reader keeps its hold while
// the one that vanished loses it; and a reader's release leaves the other
// readers' deadlines alone.
func TestReadersExpireSeparately(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "readers"
	ws := newSink()
	r := c.do(ws, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), Kind: wire.KindWrite, TTL: 10 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("write: %+v", r)
	}
	var rs []*waiterSpec
	for i := range 3 {
		w := &waiterSpec{owner: owner(10+uint64(i), 1), kind: wire.KindRead, waitID: 10 + uint64(i)}
		enqueue(t, c, key, w)
		rs = append(rs, w)
	}
	if rr := c.do(ws, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	var tok uint64
	for _, w := range rs {
		g := w.sink.granted(t, w.waitID)
		if tok != 0 && g.Token != tok {
			t.Fatalf("readers got tokens %d and %d", tok, g.Token)
		}
		tok = g.Token
	}
	// Reader 0 releases; reader 1 renews now and then; reader 2 vanishes.
	if rr := c.do(rs[0].sink, Request{Op: OpRelease, Key: key, Owner: rs[0].owner, Token: tok}); rr.Status != wire.StatusSuccess {
		t.Fatalf("reader release: %+v", rr)
	}
	for range 3 {
		fc.Advance(7 * time.Second)
		if rr := c.do(rs[1].sink, Request{Op: OpRenew, Key: key, Owner: rs[1].owner, Token: tok}); rr.Status != wire.StatusSuccess {
			t.Fatalf("reader 1 renew: %+v", rr)
		}
	}
	// Reader 2's TTL (20s by enqueue) has run out by now.
	advanceUntil(t, fc, 5*time.Millisecond, "reader 2 to expire", func() bool {
		st := c.state(key)
		return st.Readers == 1
	})
	st := c.state(key)
	if st.Status != wire.StatusSuccess || st.Holder != rs[1].owner || st.Readers != 1 {
		t.Fatalf("after reader 2 expired: %+v", st)
	}
	if l := rs[2].sink.push(t, "reader 2 lost", isLost(tok)).(*wire.Lost); l.Owner != rs[2].owner || l.Event != wire.EventExpired {
		t.Fatalf("lost: %+v", l)
	}
	if rs[1].sink.count(isLost(tok)) != 0 {
		t.Fatal("the renewing reader was told it lost the lock")
	}
	// Reader 1 stops renewing: it expires within its TTL.
	advanceUntil(t, fc, 50*time.Millisecond, "reader 1 to expire", freed(c, key))
	rs[1].sink.push(t, "reader 1 lost", isLost(tok))
}

// TestTakeOverGivesFullTTL: a new master gives every held lock a full TTL
// from the take-over (it cannot know of renewals the old master saw last),
// and frees a lock nobody renews after that.
func TestTakeOverGivesFullTTL(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		stop bool
	}{{"transfer", false}, {"master-stops", true}} {
		t.Run(mode.name, func(t *testing.T) {
			fc := newFakeClock()
			c := newFakeCluster(t, 3, Config{Clock: fc})
			const ttl = 10 * time.Second
			// Keys of one group, so that one take-over moves them all.
			g := wire.GroupOf(wire.KeyHash("ns", "k0"), c.groups)
			var keys []string
			for i := 0; len(keys) < 6; i++ {
				if k := fmt.Sprint("k", i); wire.GroupOf(wire.KeyHash("ns", k), c.groups) == g {
					keys = append(keys, k)
				}
			}
			toks := map[string]uint64{}
			hs := newSink()
			for i, k := range keys {
				r := c.do(hs, Request{Op: OpAcquire, Key: k, Owner: owner(1, uint64(i+1)), TTL: ttl})
				if r.Status != wire.StatusSuccess {
					t.Fatalf("acquire %s: %+v", k, r)
				}
				toks[k] = r.Token
			}
			// The old master renews one key late in the TTL, then
			// transfers mastership.
			fc.Advance(6 * time.Second)
			if r := c.do(hs, Request{Op: OpRenew, Key: keys[0], Owner: owner(1, 1), Token: toks[keys[0]]}); r.Status != wire.StatusSuccess {
				t.Fatalf("renew: %+v", r)
			}
			c.takeOver(g, mode.stop)
			// The new master serves and reports a full TTL for every lock.
			for _, k := range keys {
				probeHeld(t, c, k, "right after the take-over")
				if st := c.state(k); st.TTLLeftMs != uint32(ttl/time.Millisecond) {
					t.Fatalf("%s: TTL left after take-over %dms, want %v", k, st.TTLLeftMs, ttl)
				}
			}
			// Past the old deadlines (10s and 16s from the start), short of
			// take-over + TTL: nothing is freed.
			fc.Advance(ttl - time.Millisecond)
			for _, k := range keys {
				probeHeld(t, c, k, "before take-over + TTL")
			}
			for _, k := range keys {
				advanceUntil(t, fc, 10*time.Millisecond, "expiry of "+k+" after the take-over", freed(c, k))
			}
			// Tokens continue to increase after the take-over (I2).
			for _, k := range keys {
				if r := c.do(newSink(), Request{Op: OpAcquire, Key: k, Owner: owner(5, 5)}); r.Status != wire.StatusSuccess || r.Token <= toks[k] {
					t.Fatalf("acquire %s after expiry: %+v (old token %d)", k, r, toks[k])
				}
			}
		})
	}
}
