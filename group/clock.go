package group

import "time"

// Clock is the monotonic clock the master measures deadlines with (TTLs,
// waits, watches). RealClock is the process's; tests use a fake one.
type Clock interface {
	// Now returns the current time; successive calls never go backwards.
	Now() time.Time
	// AfterFunc calls f once, d after now, unless the Timer is stopped
	// first. f may run on any goroutine, the caller's included when d is
	// not positive; it only posts to a worker, so it returns at once.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a call scheduled by Clock.AfterFunc.
type Timer interface {
	// Stop cancels the call; it reports false when the call has already
	// run or been stopped. The worker ignores the result: a call that
	// runs anyway finds nothing due.
	Stop() bool
}

// RealClock is the process's monotonic clock.
type RealClock struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc calls time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
