package peers

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/paxlock/paxlock/bench/load"
)

// The API's codes land on the harness's error kinds, so a lost hold is
// counted as "not held" and an overload as "unavailable".
func TestAPIErrKinds(t *testing.T) {
	ctx := context.Background()
	for code, want := range map[connect.Code]error{
		connect.CodeNotFound:          load.ErrNotHeld,
		connect.CodePermissionDenied:  load.ErrNotHeld,
		connect.CodeAborted:           load.ErrNotHeld,
		connect.CodeUnavailable:       load.ErrUnavailable,
		connect.CodeResourceExhausted: load.ErrUnavailable,
		connect.CodeDeadlineExceeded:  context.DeadlineExceeded,
	} {
		if err := apiErr(ctx, connect.NewError(code, errors.New("x"))); !errors.Is(err, want) {
			t.Errorf("%v: %v, want %v", code, err, want)
		}
	}
}

// A server's DEADLINE_EXCEEDED just before the caller's deadline is
// reported once the caller's own context has ended, so the harness sees
// the run's end, not an error; one well before it is the server's
// answer, returned at once.
func TestAtDeadline(t *testing.T) {
	srvErr := connect.NewError(connect.CodeDeadlineExceeded, errors.New("wait ran out"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := atDeadline(ctx, srvErr)
	if ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("near the deadline: err %v, ctx %v", err, ctx.Err())
	}
	far, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := atDeadline(far, srvErr); !errors.Is(err, srvErr) || far.Err() != nil {
		t.Fatalf("far from the deadline: err %v", err)
	}
}

// waitMs is the rest of the deadline (never 0, which would be a
// try-lock), or negative without one.
func TestWaitMs(t *testing.T) {
	if w := waitMs(context.Background()); w >= 0 {
		t.Errorf("no deadline: %d", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if w := waitMs(ctx); w < 3500_000 || w > 3600_000 {
		t.Errorf("an hour: %d", w)
	}
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if w := waitMs(past); w != 1 {
		t.Errorf("past deadline: %d", w)
	}
}
