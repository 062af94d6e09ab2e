package server

import (
	"context"
	"fmt"
	"time"
)

// retry calls try until it succeeds or returns an error final says is
// final, waiting first, then twice as long each time up to limit,
// between calls. When ctx ends first it returns ctx's error wrapping the
// last one. The steps that must reach a group's master (a move step, a
// membership change) use it: a master change under way clears itself
// within a few hundred milliseconds.
func retry(ctx context.Context, first, limit time.Duration, try func() error, final func(error) bool) error {
	wait := first
	for {
		err := try()
		if err == nil || final(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, limit)
	}
}
