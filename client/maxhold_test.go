package client

import (
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestMaxHoldOption: the option is checked on the client (nothing is sent
// for a bad one: negative, over MaxHoldLimit, below the TTL) and travels
// in the Acquire, rounded up to whole milliseconds, for mutexes and
// semaphores; without it the field stays 0 (left out of the frame).
func TestMaxHoldOption(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	ctx := tctx(t)
	bad := [][]Option{
		{MaxHold(-time.Millisecond)},
		{MaxHold(MaxHoldLimit + time.Millisecond)},
		{TTL(10 * time.Second), MaxHold(9 * time.Second)},
		{MaxHold(time.Second)}, // below the default TTL
	}
	for _, opts := range bad {
		if err := c.Mutex("k", opts...).TryLock(ctx); !errors.Is(err, ErrInvalid) {
			t.Errorf("options %d: %v, want ErrInvalid", len(opts), err)
		}
	}
	if n := fc.nodes[0].count(wire.TypeAcquire); n != 0 {
		t.Fatalf("%d acquires sent for bad options", n)
	}
	cases := map[time.Duration]uint32{0: 0, time.Minute + 1500*time.Microsecond: 60002, time.Hour: 3_600_000, MaxHoldLimit: wire.MaxHoldLimitMs}
	for d, want := range cases {
		if got := c.Mutex("k", MaxHold(d)).acquireMsg(0, 0).MaxHoldMs; got != want {
			t.Errorf("MaxHold(%v): MaxHoldMs %d, want %d", d, got, want)
		}
		if got := c.Semaphore("s", 3, MaxHold(d)).m.acquireMsg(0, 0).MaxHoldMs; got != want {
			t.Errorf("semaphore MaxHold(%v): MaxHoldMs %d, want %d", d, got, want)
		}
	}
}

// TestMaxHoldValidity: the hold's validity never passes the acquire's
// send time plus the bound (less the drift margin), renewals or not; at
// that moment the client stops renewing and Lost closes with an error
// wrapping ErrHoldLimit and ErrLockLost, though the server (the fake,
// which knows no bound) still holds it.
func TestMaxHoldValidity(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	ctx := tctx(t)
	const ttl, maxHold = 300 * time.Millisecond, 900 * time.Millisecond
	m := c.Mutex("bounded", TTL(ttl), MaxHold(maxHold), AutoRenew())
	before := time.Now()
	if err := m.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	limit := after.Add(maxHold - margin(c, maxHold))
	if v := validUntil(t, m); v.After(after.Add(ttl)) {
		t.Fatalf("validity %v after the grant, past its TTL", v.Sub(before))
	}
	lost := m.Lost()
	// Renewals carry the validity to the bound and no further: read it
	// until the hold is lost.
	for done := false; !done; {
		select {
		case <-lost:
			done = true
		case <-time.After(5 * time.Millisecond):
			if v := m.ValidUntil(); v.After(limit) {
				t.Fatalf("validity %v past the bound %v (from before the acquire)", v.Sub(before), limit.Sub(before))
			}
		}
	}
	if fc.nodes[0].count(wire.TypeRenew) == 0 {
		t.Fatal("no renewal before the bound")
	}
	waitClosed(t, lost, "Lost at the maximum hold time")
	if time.Now().Before(before.Add(maxHold - margin(c, maxHold))) {
		t.Fatal("Lost closed before the maximum hold time")
	}
	atLoss := fc.nodes[0].count(wire.TypeRenew)
	err := m.Unlock(ctx)
	if !errors.Is(err, ErrHoldLimit) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock after the bound: %v, want ErrHoldLimit", err)
	}
	// A renewal sent just before the bound may still be on its way when
	// Lost closes: a round trip on the same connection lets it arrive.
	// Past that one, none may follow.
	roundTrip := func() int {
		if _, err := c.State(ctx, "bounded"); err != nil {
			t.Fatal(err)
		}
		return fc.nodes[0].count(wire.TypeRenew)
	}
	settled := roundTrip()
	if settled-atLoss > 1 {
		t.Fatalf("%d renewals after the bound (at most the one in flight may arrive)", settled-atLoss)
	}
	if n := roundTrip(); n != settled {
		t.Fatalf("%d renewals after the hold ended", n-settled)
	}
}

// TestMaxHoldLostPush: a Lost push with EventHoldLimit ends the hold with
// an error wrapping ErrHoldLimit.
func TestMaxHoldLostPush(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	m := c.Mutex("pushed", TTL(time.Minute), MaxHold(time.Hour))
	if err := m.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	h := n.locks["pushed"].holders[m.Owner()]
	h.conn.Send(wire.TypeLost, 0, &wire.Lost{Key: "pushed", Token: h.token, Owner: m.Owner(), Event: wire.EventHoldLimit})
	n.mu.Unlock()
	waitClosed(t, m.Lost(), "Lost after the push")
	if err := m.Unlock(ctx); !errors.Is(err, ErrHoldLimit) {
		t.Fatalf("Unlock after a hold-limit push: %v, want ErrHoldLimit", err)
	}
}
