package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestLockDelayOption: the option is checked on the client (nothing is
// sent for a bad one) and travels in the Acquire, rounded up to whole
// milliseconds; without it the field stays 0 (left out of the frame).
func TestLockDelayOption(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	ctx := tctx(t)
	for _, d := range []time.Duration{-time.Millisecond, MaxLockDelay + time.Millisecond} {
		if err := c.Mutex("k", LockDelay(d)).TryLock(ctx); !errors.Is(err, ErrInvalid) {
			t.Errorf("LockDelay(%v): %v, want ErrInvalid", d, err)
		}
	}
	if n := fc.nodes[0].count(wire.TypeAcquire); n != 0 {
		t.Fatalf("%d acquires sent for bad options", n)
	}
	cases := map[time.Duration]uint32{0: 0, time.Microsecond: 1, 1500 * time.Microsecond: 2, 5 * time.Second: 5000, MaxLockDelay: wire.MaxLockDelayMs}
	for d, want := range cases {
		if got := c.Mutex("k", LockDelay(d)).acquireMsg(0, 0).LockDelayMs; got != want {
			t.Errorf("LockDelay(%v): LockDelayMs %d, want %d", d, got, want)
		}
		if got := c.Semaphore("s", 3, LockDelay(d)).m.acquireMsg(0, 0).LockDelayMs; got != want {
			t.Errorf("semaphore LockDelay(%v): LockDelayMs %d, want %d", d, got, want)
		}
	}
	// A LOCK_OCCUPIED for a lock-delay: no holder, the time left.
	m := c.Mutex("k")
	err := m.lockedErr(&wire.Response{Status: wire.StatusLockOccupied, RetryAfterMs: 1200, QueueLen: 2})
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.RetryAfter != 1200*time.Millisecond || !le.Holder.IsZero() ||
		!strings.Contains(err.Error(), "lock-delay for another 1.2s") {
		t.Fatalf("locked error %v (%+v)", err, le)
	}
}

// TestCheckTokenArgs: bad arguments are refused before anything is sent;
// against a server that does not know token checks (the fake answers
// State with the first holder, like a server before them), a holder's
// token is still reported current and any other not.
func TestCheckTokenArgs(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	ctx := tctx(t)
	for name, err := range map[string]error{
		"token 0":    func() error { _, err := c.CheckToken(ctx, "k", 0); return err }(),
		"empty key":  func() error { _, err := c.CheckToken(ctx, "", 1); return err }(),
		"nil client": func() error { _, err := (*Client)(nil).CheckToken(ctx, "k", 1); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if k := n.count(wire.TypeState); k != 0 {
		t.Fatalf("%d state requests sent for bad arguments", k)
	}
	m := c.Mutex("k", TTL(time.Minute))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CheckToken(ctx, "k", m.Token()); err != nil || !ok {
		t.Fatalf("holder's token: %v %v", ok, err)
	}
	tok := m.Token()
	tc, err := c.CheckTokenState(ctx, "k", tok+1)
	if err != nil || tc.Current || !tc.State.Held || tc.State.Token != tok {
		t.Fatalf("another token: %+v %v", tc, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CheckToken(ctx, "k", tok); err != nil || ok {
		t.Fatalf("token after the release: %v %v", ok, err)
	}
}
