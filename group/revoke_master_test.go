package group

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestTokenCheckOfRevokedHold: from the moment of a force-unlock, a token
// check of the revoked hold reports no time left (a client's CheckToken
// says not current), although the hold stays in the table until its
// holder acknowledges; the holder's own state check says the same.
func TestTokenCheckOfRevokedHold(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "fenced"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	if st := c.do(newSink(), Request{Op: OpState, Key: key, Token: r.Token}); st.Token != r.Token || st.TTLLeftMs == 0 {
		t.Fatalf("token check before the force-unlock: %+v, want current", st)
	}
	done := forceAsync(t.Context(), c.master("ns", key), key)
	hs.push(t, "Lost EventRevoked", isLost(r.Token))
	st := c.do(newSink(), Request{Op: OpState, Key: key, Token: r.Token})
	if st.Status != wire.StatusSuccess || st.Token != r.Token || st.TTLLeftMs != 0 {
		t.Fatalf("token check of the revoked hold: %+v, want the hold with no time left (not current)", st)
	}
	if own := c.do(hs, Request{Op: OpState, Key: key, Owner: owner(1, 1)}); own.TTLLeftMs != 0 {
		t.Fatalf("the revoked holder's state: %+v, want no time left", own)
	}
	notYet(t, done, "before the acknowledgement")
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("acknowledgement: %+v", rr)
	}
	if res := waitForce(t, done); res.err != nil || len(res.got) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", res.got, res.err)
	}
}

// TestRevocationSurvivesMasterChange: a revocation pending when the
// group's mastership moves stays a revocation. The operator waiting on it
// is told NO_MASTER and sends it again to the new master, which refuses
// the holder's renewals (REVOKED), reports the token not current, tells
// the holder again, and ends the hold as revoked when the holder releases
// it: watchers see EventRevoked and the hold's lock-delay keeps the key
// from a stranger. Every replica's table drops the revocation with the
// hold.
func TestRevocationSurvivesMasterChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "handed"
	const delay = 5 * time.Second
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour, LockDelayMs: uint16(delay / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	done := forceAsync(ctx, c.master("ns", key), key)
	hs.push(t, "Lost EventRevoked", isLost(r.Token))
	next := c.takeOver(g, false)
	if res := waitForce(t, done); !errors.Is(res.err, ErrNotMaster) {
		t.Fatalf("ForceRelease across a master change: %+v, %v, want ErrNotMaster", res.got, res.err)
	}
	cs := newSink()
	c.svc(next).AttachClient(1, cs)
	if rr := c.do(cs, Request{Op: OpRenew, Key: key, Owner: owner(1, 1), Token: r.Token, TTL: time.Hour}); rr.Status != wire.StatusRevoked {
		t.Fatalf("renewal at the next master: %+v, want REVOKED", rr)
	}
	if st := c.do(newSink(), Request{Op: OpState, Key: key, Token: r.Token}); st.TTLLeftMs != 0 {
		t.Fatalf("token check at the next master: %+v, want not current", st)
	}
	ws := newSink()
	if w := c.do(ws, Request{Op: OpWatch, Key: key, WatchID: 7, Token: r.Token, Flags: wire.FlagContinuous, MaxWait: -1}); w.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", w)
	}
	// The holder may have heard of the revocation when it attached; the
	// retry tells it once more, which shows the retry is waiting.
	told := cs.count(isLost(r.Token))
	done = forceAsync(ctx, c.svc(next), key) // the operator's retry
	cs.wait(t, "Lost EventRevoked from the next master's retry", func() bool {
		n := 0
		for _, m := range cs.pushes {
			if isLost(r.Token)(m) {
				n++
			}
		}
		return n > told
	})
	notYet(t, done, "the retry before the acknowledgement")
	if rr := c.do(cs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("acknowledgement at the next master: %+v", rr)
	}
	if res := waitForce(t, done); res.err != nil || len(res.got) != 1 || res.got[0].Token != r.Token {
		t.Fatalf("the retried ForceRelease: %+v, %v", res.got, res.err)
	}
	if evs := ws.waitWatch(t, 7, 1); evs[0].Event != wire.EventRevoked {
		t.Fatalf("watch event %+v, want EventRevoked", evs[0])
	}
	wantDelayed(t, c, key, delay, "after the revoked hold ended under the next master")
	for i, rep := range c.fgs[g].replicas {
		if rep.sm.revokedHold(fullKey("ns", key), owner(1, 1), r.Token) {
			t.Fatalf("replica %d still marks the ended hold revoked", i+1)
		}
	}
}

// TestRevokedHoldExpiresAsRevoked: a revoked hold whose holder never
// acknowledges, across a master change, ends at the new master's deadline
// as revoked (EventRevoked, its lock-delay kept), not as a plain expiry.
func TestRevokedHoldExpiresAsRevoked(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key = "silent-handed"
	const ttl, delay = 10 * time.Second, 3 * time.Second
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: ttl, LockDelayMs: uint16(delay / time.Millisecond)})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	done := forceAsync(t.Context(), c.master("ns", key), key)
	hs.push(t, "Lost EventRevoked", isLost(r.Token))
	c.takeOver(g, false)
	waitForce(t, done)
	ws := newSink()
	if w := c.do(ws, Request{Op: OpWatch, Key: key, WatchID: 3, Token: r.Token, Flags: wire.FlagContinuous, MaxWait: -1}); w.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", w)
	}
	fc.Advance(ttl)
	if evs := ws.waitWatch(t, 3, 1); evs[0].Event != wire.EventRevoked {
		t.Fatalf("watch event at the deadline %+v, want EventRevoked", evs[0])
	}
	wantDelayed(t, c, key, delay, "after the revoked hold's deadline")
}

// TestRevocationCheckpointed: a revocation outlives a checkpoint and a
// restart of the state machine from it, and its record goes once the
// hold has ended.
func TestRevocationCheckpointed(t *testing.T) {
	t.Parallel()
	sm := NewStateMachine(2)
	key := fullKey("ns", "k")
	o := owner(1, 1)
	apply := func(inst uint64, c command) *outcome {
		res := make([]any, 1)
		sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, nopWriter{}, res)
		return res[0].(*outcome)
	}
	a := apply(1, command{op: opAcquire, key: key, owner: o, kind: wire.KindExclusive, ttlMs: 1000})
	if out := apply(2, command{op: opRevoke, key: key, owner: o, token: a.token + 1}); out.status != wire.StatusTokenError {
		t.Fatalf("revoke of another token: %v", out.status)
	}
	if out := apply(3, command{op: opRevoke, key: key, owner: o, token: a.token}); out.status != wire.StatusSuccess {
		t.Fatalf("revoke: %v", out.status)
	}
	kv := newMemKV()
	sm.Checkpoint(kv)
	sm2 := NewStateMachine(2)
	if err := sm2.Load(kv, 3); err != nil {
		t.Fatal(err)
	}
	if !sm2.revokedHold(key, o, a.token) {
		t.Fatal("the revocation did not survive the checkpoint")
	}
	apply(4, command{op: opRelease, key: key, owner: o, token: a.token})
	if sm.revokedHold(key, o, a.token) {
		t.Fatal("the revocation outlived its hold")
	}
	sm.Checkpoint(kv)
	for k := range kv.m {
		if k[0] == revokePrefix {
			t.Fatalf("a revoked-holds record is left after the hold ended: %q", k)
		}
	}
}

// FuzzDecodeRevoked: any bytes either fail to decode as a revoked-holds
// record (as Load and a backup's check read them) or decode to marks
// whose encoding decodes to the same marks.
func FuzzDecodeRevoked(f *testing.F) {
	f.Add(encodeRevoked(nil, []revMark{{owner: owner(1, 2), token: 7}}))
	f.Add(encodeRevoked(nil, []revMark{{owner: owner(1, 2), token: 7}, {owner: owner(3, 4), token: 7}}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := decodeRevoked(b)
		if err != nil {
			return
		}
		if len(ms) == 0 {
			t.Fatal("decoded a record without marks")
		}
		ms2, err := decodeRevoked(encodeRevoked(nil, ms))
		if err != nil || !slices.Equal(ms, ms2) {
			t.Fatalf("marks %+v re-encoded: %+v, %v", ms, ms2, err)
		}
	})
}
