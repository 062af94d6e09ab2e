package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestStatusRetryTable: every status an answer can carry gets the policy
// doEach is meant to apply to it; a status the table does not name is an
// answer for the caller.
func TestStatusRetryTable(t *testing.T) {
	t.Parallel()
	want := map[wire.Status]retryPolicy{
		wire.StatusMasterRedirect: {retry: true, wait: waitRedirect, view: viewRefresh},
		wire.StatusNoMaster:       {retry: true, wait: waitHinted, view: viewRefreshWide, wake: true},
		wire.StatusOverloaded:     {retry: true, wait: waitHinted},
		wire.StatusMoving:         {retry: true, wait: waitHint, wake: true, free: true},
		wire.StatusMoved:          {retry: true, wait: waitBackoff, view: viewFollowMoved, wake: true},
		wire.StatusTimeout:        {retry: true, wait: waitBackoff, unknown: true},
	}
	for s := range 256 {
		st := wire.Status(s)
		if got := statusRetry[st]; got != want[st] {
			t.Errorf("status %v: policy %+v, want %+v", st, got, want[st])
		}
	}
	for _, st := range []wire.Status{wire.StatusSuccess, wire.StatusLockOccupied, wire.StatusLockWait,
		wire.StatusAuthFailed, wire.StatusBadRequest, wire.StatusLockDeleted, wire.StatusRevoked} {
		if statusRetry[st].retry {
			t.Errorf("status %v is retried; it is an answer for the caller", st)
		}
	}
}

// TestErrorPolicy: an attempt that got no answer is retried or fails by
// the first rule of errorRetry it matches, in the rules' order.
func TestErrorPolicy(t *testing.T) {
	t.Parallel()
	retryWake := retryPolicy{retry: true, wake: true}
	cases := []struct {
		name     string
		err      error
		ctxDone  bool
		haveView bool
		want     retryPolicy
		ctxEnded bool
	}{
		{"auth with a view", fmt.Errorf("node: %w", ErrAuth), false, true, retryPolicy{retry: true, wake: true, needsView: true}, false},
		{"auth without a view", ErrAuth, false, false, retryPolicy{}, false},
		{"auth while ctx ended", ErrAuth, true, false, retryPolicy{}, false},
		{"closed", ErrClosed, false, true, retryPolicy{}, false},
		{"connection lost", fmt.Errorf("x: %w", errConnLost), false, true, retryPolicy{retry: true, wake: true, unknown: true}, false},
		{"attempt timeout", errAttemptTimeout, false, true, retryPolicy{retry: true, wake: true, unknown: true}, false},
		{"connection lost as ctx ended", errConnLost, true, true, retryPolicy{retry: true, wake: true, unknown: true}, false},
		{"ctx ended", context.Canceled, true, true, retryPolicy{}, true},
		{"no master as ctx ended", ErrNoMaster, true, true, retryPolicy{}, true},
		{"no master", ErrNoMaster, false, true, retryWake, false},
		{"unavailable", fmt.Errorf("dial: %w", ErrUnavailable), false, false, retryWake, false},
		{"overloaded", ErrOverloaded, false, true, retryPolicy{retry: true}, false},
		{"overloaded and unavailable", fmt.Errorf("%w: %w", ErrUnavailable, ErrOverloaded), false, true, retryPolicy{retry: true}, false},
		{"anything else", errors.New("bad frame"), false, true, retryPolicy{}, false},
	}
	for _, tc := range cases {
		got, ended := errorPolicy(tc.err, tc.ctxDone, tc.haveView)
		if got != tc.want || ended != tc.ctxEnded {
			t.Errorf("%s: policy %+v, ctx ended %v; want %+v, %v", tc.name, got, ended, tc.want, tc.ctxEnded)
		}
	}
}

// TestRetryDelay: the waits of the policies: a redirect to a named node
// is followed at once twice, a hint is honoured, at least the backoff
// where the policy says so.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	c := &Client{cfg: Config{RetryBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}}
	inBackoff := func(d time.Duration) bool { return d >= 5*time.Millisecond && d <= 10*time.Millisecond }
	redirect := statusRetry[wire.StatusMasterRedirect]
	for n := 1; n <= 2; n++ {
		if d := redirect.delay(c, 0, &wire.Response{}, n, true); d != 0 {
			t.Errorf("redirect %d to a named node waits %v, want 0", n, d)
		}
	}
	if d := redirect.delay(c, 0, &wire.Response{}, 3, true); !inBackoff(d) {
		t.Errorf("third redirect waits %v, want the backoff", d)
	}
	if d := redirect.delay(c, 0, &wire.Response{}, 1, false); !inBackoff(d) {
		t.Errorf("redirect naming no other node waits %v, want the backoff", d)
	}
	hinted := &wire.Response{RetryAfterMs: 50}
	if d := statusRetry[wire.StatusNoMaster].delay(c, 0, hinted, 0, false); d != 50*time.Millisecond {
		t.Errorf("NO_MASTER with a 50 ms hint waits %v", d)
	}
	if d := statusRetry[wire.StatusOverloaded].delay(c, 0, &wire.Response{}, 0, false); !inBackoff(d) {
		t.Errorf("OVERLOADED without a hint waits %v, want the backoff", d)
	}
	if d := statusRetry[wire.StatusMoving].delay(c, 0, &wire.Response{}, 0, false); d != time.Millisecond {
		t.Errorf("MOVING without a hint waits %v, want 1 ms", d)
	}
	if d := statusRetry[wire.StatusMoving].delay(c, 0, hinted, 0, false); d != 50*time.Millisecond {
		t.Errorf("MOVING with a 50 ms hint waits %v", d)
	}
	if d := statusRetry[wire.StatusTimeout].delay(c, 0, &wire.Response{}, 0, false); !inBackoff(d) {
		t.Errorf("TIMEOUT waits %v, want the backoff", d)
	}
}
