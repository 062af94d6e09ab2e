package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// TestLockDelayAndTokenCheck: the Go client against three in-process
// nodes. A token check says true for the holder's token and false for
// any other; a hold with a lock-delay that an operator force-unlocks
// leaves its key ungrantable (TryLock's LockedError has no holder and
// says what is left, State says it too); the master of the key's group
// dies and the new one still refuses the key, while the other key's
// holder's token is still current there; a release and another holder's
// grant make a token stale; a short delay ends and a blocked Lock gets
// the key no earlier than the delay after the force-unlock began.
func TestLockDelayAndTokenCheck(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	a, b := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	groups := len(tc.nodes[0].svc.Groups())
	groupOf := func(key string) int { return wire.GroupOf(wire.KeyHash("ns", key), groups) }
	masterOf := func(g int) int {
		i := -1
		waitFor(t, fmt.Sprintf("a master of group %d", g), func() bool {
			for j, s := range tc.nodes {
				if s != nil && s.svc.Group(group.ID(g)).Serving() {
					i = j
					return true
				}
			}
			return false
		})
		return i
	}
	const long = "printer" // a lock-delay of a minute, whose end the test does not wait for
	g := groupOf(long)
	check := ""
	for i := 0; check == ""; i++ {
		if k := fmt.Sprintf("ledger-%d", i); groupOf(k) == g {
			check = k
		}
	}

	m := a.Mutex(check, client.TTL(time.Minute), client.AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := m.Token()
	if ok, err := b.CheckToken(ctx, check, tok); err != nil || !ok {
		t.Fatalf("check of the holder's token: %v %v", ok, err)
	}
	if ok, err := b.CheckToken(ctx, check, tok+1); err != nil || ok {
		t.Fatalf("check of a token no hold has: %v %v", ok, err)
	}

	h := a.Mutex(long, client.TTL(time.Hour), client.LockDelay(client.MaxLockDelay))
	if err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	old := h.Token()
	victim := masterOf(g)
	if got, err := tc.nodes[victim].svc.ForceRelease(ctx, "ns", long); err != nil || len(got) != 1 {
		t.Fatalf("force release: %+v %v", got, err)
	}
	select {
	case <-h.Lost():
	case <-ctx.Done():
		t.Fatal("the holder was not told it lost the lock")
	}
	wantDelayed := func(when string) {
		t.Helper()
		var le *client.LockedError
		err := b.Mutex(long).TryLock(ctx)
		if !errors.As(err, &le) || !le.Holder.IsZero() || le.RetryAfter <= 0 || le.RetryAfter > client.MaxLockDelay {
			t.Fatalf("%s: TryLock: %v, want a LockedError for the lock-delay", when, err)
		}
		st, err := b.State(ctx, long)
		if err != nil || st.Held || st.DelayLeft <= 0 {
			t.Fatalf("%s: state %+v %v, want free with a delay left", when, st, err)
		}
		if ok, err := b.CheckToken(ctx, long, old); err != nil || ok {
			t.Fatalf("%s: check of the force-unlocked hold's token: %v %v", when, ok, err)
		}
	}
	wantDelayed("after the force-unlock")

	// The group's master dies: the new master has the delay (and gives
	// it in full from its take-over) and the other key's hold.
	tc.stop(victim)
	if masterOf(g) == victim {
		t.Fatal("the stopped node still masters the group")
	}
	wantDelayed("on the new master")
	if ok, err := b.CheckToken(ctx, check, tok); err != nil || !ok {
		t.Fatalf("check of the holder's token on the new master: %v %v", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.CheckToken(ctx, check, tok); err != nil || ok {
		t.Fatalf("check of a released hold's token: %v %v", ok, err)
	}
	m2 := b.Mutex(check, client.TTL(time.Minute))
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.CheckToken(ctx, check, tok); err != nil || ok {
		t.Fatalf("check of the old token with another holder: %v %v", ok, err)
	}
	if ok, err := a.CheckToken(ctx, check, m2.Token()); err != nil || !ok || m2.Token() <= tok {
		t.Fatalf("check of the new holder's token %d (old %d): %v %v", m2.Token(), tok, ok, err)
	}

	// A short delay ends, and the blocked Lock is granted then.
	const short, delay = "short", 2 * time.Second
	hs := a.Mutex(short, client.TTL(time.Hour), client.LockDelay(delay))
	if err := hs.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hsTok := hs.Token()
	start := time.Now()
	if got, err := tc.nodes[masterOf(groupOf(short))].svc.ForceRelease(ctx, "ns", short); err != nil || len(got) != 1 {
		t.Fatalf("force release of %s: %+v %v", short, got, err)
	}
	w := b.Mutex(short, client.TTL(time.Minute))
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < delay {
		t.Fatalf("granted %v after the force-unlock began, before the %v lock-delay ended", waited, delay)
	}
	if w.Token() <= hsTok {
		t.Fatalf("token %d after %d", w.Token(), hsTok)
	}
}
