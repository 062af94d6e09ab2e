package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// keyMaster returns the index of the node that masters key's group (in
// namespace "ns"), waiting until one does.
func keyMaster(t *testing.T, tc *testCluster, key string) int {
	t.Helper()
	master := -1
	waitFor(t, "a master for "+key, func() bool {
		for i, s := range tc.nodes {
			if s == nil {
				continue
			}
			g := wire.GroupOf(wire.KeyHash("ns", key), len(s.svc.Groups()))
			if s.svc.Group(group.ID(g)).Serving() {
				master = i
				return true
			}
		}
		return false
	})
	return master
}

// TestHolderValueAgainstCluster: a value given at acquire is seen by a
// contender, by State and by a watcher; SetValue changes it (same token)
// and survives the key's group master being stopped; a value over the
// limit is refused and changes nothing.
func TestHolderValueAgainstCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2 := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	const key = "job:7"

	a := c1.Mutex(key, client.TTL(10*time.Second), client.AutoRenew(), client.Value("host=a pid=1"))
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := a.Token()
	w, err := c2.Watch(ctx, key, 0, client.Continuous())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(what string) client.Event {
		t.Helper()
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("%s: watch ended: %v", what, w.Err())
			}
			return ev
		case <-ctx.Done():
			t.Fatalf("%s: no event", what)
		}
		return client.Event{}
	}
	if ev := next("current holder"); ev.Type != client.EventAcquired || ev.Token != tok || ev.Value != "host=a pid=1" {
		t.Fatalf("first event %+v", ev)
	}
	err = c2.Mutex(key).TryLock(ctx)
	var le *client.LockedError
	if !errors.As(err, &le) || le.Value != "host=a pid=1" || le.Token != tok {
		t.Fatalf("contender: %v", err)
	}
	if err := a.SetValue(ctx, "step 2"); err != nil {
		t.Fatal(err)
	}
	if ev := next("value change"); ev.Type != client.EventAcquired || ev.Token != tok || ev.Value != "step 2" {
		t.Fatalf("value change event %+v", ev)
	}
	// Too large: refused before sending, nothing changes.
	if err := a.SetValue(ctx, strings.Repeat("x", wire.MaxValueLen+1)); !errors.Is(err, client.ErrInvalid) || !errors.Is(err, wire.ErrValueTooLarge) {
		t.Fatalf("oversized SetValue: %v", err)
	}
	// A client that sends one anyway gets BAD_REQUEST and nothing changes.
	rc := tc.masterConn("ns", key, 77)
	big := strings.Repeat("x", wire.MaxValueLen+1)
	if r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: "other", Owner: wire.Owner{Client: 77, ID: 1}, Weight: 1, Value: big}); r.Status != wire.StatusBadRequest || !strings.Contains(r.Msg, "value too large") {
		t.Fatalf("oversized Acquire: %+v", r)
	}
	if r := rc.call(wire.TypeRenew, &wire.Renew{Key: key, Owner: a.Owner(), Token: tok, SetValue: true, Value: big}); r.Status != wire.StatusBadRequest {
		t.Fatalf("oversized Renew: %+v", r)
	}
	if st, err := c2.State(ctx, key); err != nil || st.Value != "step 2" || st.Token != tok {
		t.Fatalf("state after refused SetValue: %+v %v", st, err)
	}

	// Stop the master of the key's group: the value is replicated.
	tc.stop(keyMaster(t, tc, key))
	waitFor(t, "state from the new master", func() bool {
		st, err := c2.State(ctx, key)
		return err == nil && st.Held && st.Value == "step 2" && st.Token == tok
	})
	if err := a.SetValue(ctx, "step 3"); err != nil {
		t.Fatal(err)
	}
	if st, err := c2.State(ctx, key); err != nil || st.Value != "step 3" || st.Token != tok || !a.Held() {
		t.Fatalf("state after SetValue on the new master: %+v %v", st, err)
	}
	waitFor(t, "the watcher hears of step 3", func() bool {
		select {
		case ev := <-w.Events():
			return ev.Value == "step 3" && ev.Token == tok
		default:
			return false
		}
	})
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionAgainstCluster: campaign, proclaim, observe and resign
// against three nodes, with the election key's group master stopped in
// the middle; never two leaders, terms increase, and the observer ends
// with the latest leader.
func TestElectionAgainstCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2, c3 := newClient(t, tc), newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	const name = "scheduler"

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := c3.Election(name).Observe(octx)
	var seen uint64 // observed terms never go down
	await := func(what string, ok func(client.Leader) bool) client.Leader {
		t.Helper()
		for {
			select {
			case l, open := <-obs:
				if !open {
					t.Fatalf("%s: observe ended", what)
				}
				if l.Token < seen {
					t.Fatalf("%s: observed term %d after %d", what, l.Token, seen)
				}
				seen = l.Token
				if ok(l) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("%s: not observed", what)
			}
		}
	}

	e1 := c1.Election(name, client.TTL(10*time.Second))
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	t1 := e1.Token()
	await("first leader", func(l client.Leader) bool { return l.Value == "a" && l.Token == t1 })
	if l, err := c3.Election(name).Leader(ctx); err != nil || l.Value != "a" || l.Token != t1 {
		t.Fatalf("Leader: %+v %v", l, err)
	}

	e2 := c2.Election(name, client.TTL(10*time.Second))
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "b") }()

	if err := e1.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	await("proclaim", func(l client.Leader) bool { return l.Value == "a2" && l.Token == t1 })

	tc.stop(keyMaster(t, tc, name))
	// The leader keeps leading across the master change (its lock is
	// replicated and auto-renewed), and its next Proclaim is observed.
	waitFor(t, "proclaim on the new master", func() bool { return e1.Proclaim(ctx, "a3") == nil })
	await("proclaim after master change", func(l client.Leader) bool { return l.Value == "a3" && l.Token == t1 })
	select {
	case err := <-won:
		t.Fatalf("second candidate won while the first leads: %v", err)
	default:
	}
	if !e1.IsLeader() {
		t.Fatal("the leader lost leadership in the master change")
	}

	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	if e1.IsLeader() || !e2.IsLeader() || e2.Token() <= t1 {
		t.Fatalf("after resign: e1 %v, e2 %v, terms %d then %d", e1.IsLeader(), e2.IsLeader(), t1, e2.Token())
	}
	l := await("second leader", func(l client.Leader) bool { return l.Token > t1 })
	if l.Value != "b" || l.Token != e2.Token() {
		t.Fatalf("observed %+v, want b with term %d", l, e2.Token())
	}
	if err := e2.Proclaim(ctx, strings.Repeat("x", wire.MaxValueLen+1)); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("oversized proclaim: %v", err)
	}
	if l, err := e2.Leader(ctx); err != nil || l.Value != "b" {
		t.Fatalf("leader after refused proclaim: %+v %v", l, err)
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader of an empty election: %v", err)
	}
}
