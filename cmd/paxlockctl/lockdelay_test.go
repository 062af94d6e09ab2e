package main

import (
	"errors"
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

// TestMaxHoldFlag: -max-hold is parsed for the run forms and becomes the
// hold's MaxHold option; one over the limit or below the TTL is a usage
// error before anything is dialled.
func TestMaxHoldFlag(t *testing.T) {
	t.Parallel()
	o := &options{}
	fs := newFlagSet(o)
	pos, dash, err := parseInterspersed(fs, []string{"-max-hold", "1h", "lock", "k", "--", "true"})
	if err != nil || dash < 0 || len(pos) < 2 {
		t.Fatalf("parse: %v %d %v", pos, dash, err)
	}
	if o.maxHold != time.Hour {
		t.Fatalf("-max-hold 1h parsed as %v", o.maxHold)
	}
	if n := len(holdOptions(o)); n != 3 {
		t.Fatalf("a run form's hold with -max-hold has %d options, want TTL, AutoRenew and MaxHold", n)
	}
	if err := checkMaxHold(o); err != nil {
		t.Fatalf("-max-hold 1h: %v", err)
	}
	for _, bad := range []options{{maxHold: 25 * time.Hour}, {maxHold: 10 * time.Second}, {maxHold: time.Minute, ttl: 2 * time.Minute}} {
		if err := checkMaxHold(&bad); !errors.Is(err, errUsage) {
			t.Errorf("-max-hold %v with -ttl %v: %v, want a usage error", bad.maxHold, bad.ttl, err)
		}
	}
}
