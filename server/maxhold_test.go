package server

import (
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// TestMaxHoldAgainstNode: the Go client against an in-process node. A
// holder that keeps renewing loses the lock at its maximum hold time
// (Lost closes, the error wraps ErrHoldLimit); the node ends the hold
// itself (the holder never releases it) and grants it to the blocked
// waiter, counting the end in paxlock_hold_limit_revocations_total; a
// hold without a bound held past long_hold_threshold counts in
// paxlock_long_holds.
func TestMaxHoldAgainstNode(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) {
		th := Duration(time.Second)
		c.LongHoldThreshold = &th
	})
	admin := tc.cfgs[0].AdminAddr
	a, b := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	long := a.Mutex("long-held", client.TTL(30*time.Second))
	if err := long.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Renewed across two TTLs before the bound: a renewal may take a
	// second on a loaded machine, so the TTL leaves it room.
	m := a.Mutex("bounded", client.TTL(3*time.Second), client.MaxHold(6*time.Second), client.AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	w := b.Mutex("bounded", client.TTL(30*time.Second))
	granted := make(chan error, 1)
	go func() { granted <- w.Lock(ctx) }()
	select {
	case <-m.Lost():
	case <-ctx.Done():
		t.Fatal("the bounded holder was not told it lost the lock")
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was not granted the bounded lock")
	}
	if err := m.Unlock(ctx); !errors.Is(err, client.ErrHoldLimit) {
		t.Fatalf("Unlock after the hold limit: %v, want ErrHoldLimit", err)
	}
	waitFor(t, "the hold-limit end counted", func() bool {
		return sumOf(scrape(t, admin), "paxlock_hold_limit_revocations_total", nil) == 1
	})
	waitFor(t, "the long hold counted", func() bool {
		return sumOf(scrape(t, admin), "paxlock_long_holds", nil) >= 1
	})
}
