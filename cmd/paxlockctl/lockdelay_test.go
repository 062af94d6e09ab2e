package main

import (
	"testing"
	"time"
)

// TestLockDelayFlag: -lock-delay is parsed for the run forms and becomes
// the hold's lock-delay option; without it the hold has none.
func TestLockDelayFlag(t *testing.T) {
	t.Parallel()
	o := &options{}
	fs := newFlagSet(o)
	pos, dash, err := parseInterspersed(fs, []string{"-lock-delay", "2s", "lock", "k", "--", "true"})
	if err != nil || dash < 0 || len(pos) < 2 {
		t.Fatalf("parse: %v %d %v", pos, dash, err)
	}
	if o.lockDelay != 2*time.Second {
		t.Fatalf("-lock-delay 2s parsed as %v", o.lockDelay)
	}
	if n := len(holdOptions(o)); n != 3 {
		t.Fatalf("a run form's hold with -lock-delay has %d options, want TTL, AutoRenew and LockDelay", n)
	}
	if n := len(holdOptions(&options{})); n != 2 {
		t.Fatalf("a run form's hold without -lock-delay has %d options, want 2", n)
	}
}
