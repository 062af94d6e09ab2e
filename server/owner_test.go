package server

import (
	"fmt"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// TestOwnersBoundToSessions forges requests on raw connections: a client
// of the namespace that learned a holder (and its token) from State cannot
// release, renew, re-acquire, take over a wait, cancel a wait or end a
// watch as that holder, directly or through a relay, and cannot say Hello
// as the holder's client without its key. Every forged request is
// AUTH_FAILED and changes nothing; the real owners' requests, directly and
// through a relay, still work.
func TestOwnersBoundToSessions(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	// The setup needs the key's master to stay put from the acquire to
	// the queued wait; a master change in between (a lease lapsing on a
	// loaded machine) starts it again on another key.
	var (
		key, master, other string
		holder, waiter     *rawConn
		tok                uint64
		wait               *wire.Acquire
	)
	owner := wire.Owner{Client: cid(1), ID: 1}
	waitOwner := wire.Owner{Client: cid(2), ID: 1}
	moved := func(st wire.Status) bool { return st == wire.StatusMasterRedirect || st == wire.StatusNoMaster }
	for try := 0; ; try++ {
		key = fmt.Sprintf("owned-%d", try)
		mi := tc.masterIndex("ns", key)
		master = tc.nodes[mi].cfg.self().Client
		other = tc.nodes[(mi+1)%3].cfg.self().Client
		holder = dialRaw(t, master)
		if r := holder.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
			t.Fatalf("holder hello: %+v", r)
		}
		r := holder.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: owner, Weight: 1, TTLMs: 60000})
		if try < 2 && moved(r.Status) {
			continue
		}
		if r.Status != wire.StatusSuccess {
			t.Fatalf("acquire: %+v", r)
		}
		tok = r.Token
		w := holder.call(wire.TypeWatch, &wire.Watch{Key: key, WatchID: 5, Token: tok})
		if try < 2 && moved(w.Status) {
			continue
		}
		if w.Status != wire.StatusSuccess {
			t.Fatalf("watch: %+v", w)
		}
		waiter = dialRaw(t, master)
		waiter.hello("ns", "s3cret", 2)
		wait = &wire.Acquire{Key: key, Owner: waitOwner, Weight: 1, TTLMs: 60000, MaxWaitMs: wire.WaitForever, WaitID: 77}
		w = waiter.call(wire.TypeAcquire, wait)
		if try < 2 && moved(w.Status) {
			continue
		}
		if w.Status != wire.StatusLockWait {
			t.Fatalf("blocking acquire: %+v", w)
		}
		break
	}

	unchanged := func(when string) {
		t.Helper()
		st := tc.masterConn("ns", key, 4).callMaster(wire.TypeState, &wire.State{Key: key})
		if st.Status != wire.StatusSuccess || st.Holder != owner || st.Token != tok || st.QueueLen != 1 {
			t.Fatalf("%s: state %+v, want held by %v with token %d and one waiter", when, st, owner, tok)
		}
	}

	// The attacker learns the holder and its token from State.
	attacker := dialRaw(t, master)
	if r := attacker.hello("ns", "s3cret", 3); r.Status != wire.StatusSuccess {
		t.Fatalf("attacker hello: %+v", r)
	}
	st := attacker.callMaster(wire.TypeState, &wire.State{Key: key})
	if st.Holder != owner || st.Token != tok {
		t.Fatalf("State hides the holder: %+v", st)
	}
	forged := map[string]struct {
		typ wire.Type
		m   wire.Message
	}{
		"release":     {wire.TypeRelease, &wire.Release{Key: key, Owner: st.Holder, Token: st.Token}},
		"renew":       {wire.TypeRenew, &wire.Renew{Key: key, Owner: st.Holder, Token: st.Token, TTLMs: 60000}},
		"re-acquire":  {wire.TypeAcquire, &wire.Acquire{Key: key, Owner: st.Holder, Weight: 1, TTLMs: 60000}},
		"take a wait": {wire.TypeAcquire, &wire.Acquire{Key: key, Owner: waitOwner, Weight: 1, MaxWaitMs: wire.WaitForever, WaitID: 77}},
		"cancel":      {wire.TypeCancelWait, &wire.CancelWait{Key: key, Owner: waitOwner, WaitID: 77}},
	}
	for name, f := range forged {
		if r := attacker.call(f.typ, f.m); r.Status != wire.StatusAuthFailed {
			t.Errorf("forged %s: %+v, want AUTH_FAILED", name, r)
		}
	}
	// A watch belongs to the connection that made it: Unwatch elsewhere
	// ends nothing (checked below: the holder's watch still fires).
	if r := attacker.callMaster(wire.TypeUnwatch, &wire.Unwatch{Key: key, WatchID: 5}); r.Status != wire.StatusSuccess {
		t.Errorf("unwatch: %+v", r)
	}
	unchanged("after forged requests")

	// A handshake as the holder's client without its key is refused, and
	// leaves the attacker's session as it was.
	for name, h := range map[string]*wire.ScramClientFirst{
		"no key":    {Namespace: "ns", ClientID: owner.Client},
		"other key": {Namespace: "ns", ClientID: owner.Client, ClientKey: testKey(3)},
	} {
		h.Mechanism, h.Message = wire.MechanismSCRAMSHA256, "n,,n=ns,r=fyko+d2lbbFgONRv9qkxdawL"
		if r := attacker.call(wire.TypeScramClientFirst, h); r.Status != wire.StatusAuthFailed {
			t.Errorf("handshake as the holder's client, %s: %+v", name, r)
		}
	}
	if r := attacker.call(wire.TypeRelease, &wire.Release{Key: key, Owner: owner, Token: tok}); r.Status != wire.StatusAuthFailed {
		t.Errorf("release after a refused Hello: %+v", r)
	}

	// Through a relay: the forging node checks before it forwards; the
	// real owner's requests are forwarded and served.
	relayed := dialRaw(t, other)
	relayed.hello("ns", "s3cret", 3)
	if r := relayed.call(wire.TypeRelease, &wire.Release{Key: key, Owner: owner, Token: tok, Redirects: wire.ForwardNow}); r.Status != wire.StatusAuthFailed {
		t.Errorf("forged release through a relay: %+v", r)
	}
	unchanged("after a forged relayed release")
	real := dialRaw(t, other)
	real.hello("ns", "s3cret", 1)
	if r := real.call(wire.TypeRenew, &wire.Renew{Key: key, Owner: owner, Token: tok, TTLMs: 60000, Redirects: wire.ForwardNow}); r.Status != wire.StatusSuccess {
		t.Fatalf("the owner's renew through a relay: %+v", r)
	}
	unchanged("after the owner's relayed renew")
	if r := real.call(wire.TypeRelease, &wire.Release{Key: key, Owner: owner, Token: tok, Redirects: wire.ForwardNow}); r.Status != wire.StatusSuccess {
		t.Fatalf("the owner's release through a relay: %+v", r)
	}

	// The wait the attacker tried to take and cancel is granted to its
	// owner, and the watch the attacker tried to end fires.
	if g := waiter.awaitGranted(wait); g.Status != wire.StatusSuccess || g.Token <= tok {
		t.Fatalf("grant %+v", g)
	}
	for {
		f, m, err := holder.read()
		if err != nil {
			t.Fatalf("waiting for the watch event: %v", err)
		}
		if ev, ok := m.(*wire.WatchEvent); ok && f.ReqID == 0 {
			if ev.WatchID != 5 {
				t.Fatalf("watch event %+v", ev)
			}
			break
		}
	}
}
