package client

import (
	"errors"
	"testing"
	"time"
)

func TestLocker(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	a, b := c.Mutex("k").Locker(), c.Mutex("k").Locker()
	a.Lock()
	if _, _, held := n.holderOf("k"); !held {
		t.Fatal("Locker.Lock returned without the server granting k")
	}
	locked := make(chan struct{})
	go func() {
		b.Lock()
		close(locked)
	}()
	n.waitFor(t, "b queued", func(n *fakeNode) bool { return len(n.waiters["k"]) == 1 })
	select {
	case <-locked:
		t.Fatal("second Locker locked while the first held k")
	default:
	}
	a.Unlock()
	waitClosed(t, locked, "second Locker's Lock after the first's Unlock")
	b.Unlock()
	if _, _, held := n.holderOf("k"); held {
		t.Fatal("k still held after Unlock")
	}
}

func TestLockerPanics(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, testConfig(fc.nodes[0].addr))
	l := c.Mutex("k").Locker()
	if err := recoverErr(l.Unlock); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of an unlocked Locker: panic %v, want ErrNotHeld", err)
	}
	if err := recoverErr(c.Mutex("").Locker().Lock); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Lock of an invalid key: panic %v, want ErrInvalid", err)
	}
	c.Close()
	if err := recoverErr(l.Lock); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock after Close: panic %v, want ErrClosed", err)
	}
}

// recoverErr runs f and returns the error it panicked with (nil if it
// returned, or panicked with something else).
func recoverErr(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
		}
	}()
	f()
	return nil
}

// TestLockerAfterLoss: a reentrant Lock of a Locker whose lock was lost
// while held panics with an error wrapping ErrLockLost, as the doc says,
// instead of retrying for ever; after Unlock the Locker locks again.
func TestLockerAfterLoss(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1)
	n := fc.nodes[0]
	c := newTestClient(t, testConfig(n.addr))
	m := c.Mutex("k")
	l := m.Locker()
	l.Lock()
	n.revoke("k")
	waitClosed(t, m.Lost(), "the handle's Lost after the revocation")
	res := make(chan error, 1)
	go func() { res <- recoverErr(l.Lock) }()
	select {
	case err := <-res:
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("Lock after the loss: panic %v, want ErrLockLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Lock after the loss neither returned nor panicked within 30 s (retrying for ever)")
	}
	if err := recoverErr(l.Unlock); err != nil {
		t.Fatalf("Unlock after the loss panicked: %v", err)
	}
	l.Lock()
	if _, _, held := n.holderOf("k"); !held {
		t.Fatal("Locker.Lock after Unlock returned without the server granting k")
	}
	l.Unlock()
}
