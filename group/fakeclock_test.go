package group

import (
	"time"

	"github.com/paxlock/paxlock/internal/clock"
)

// newFakeClock is the manual clock of the lock service's tests: time
// moves only when a test calls Advance.
func newFakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}
