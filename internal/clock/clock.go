package clock

import "time"

// Clock is a monotonic clock.
type Clock interface {
	// Now returns the current time; successive calls never go backwards.
	Now() time.Time
	// AfterFunc calls f once, d after now, unless the Timer is stopped
	// first. f may run on any goroutine, the caller's included when d is
	// not positive.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a call scheduled by Clock.AfterFunc.
type Timer interface {
	// Stop cancels the call; it reports false when the call has already
	// run or been stopped.
	Stop() bool
}

// Real is the process's monotonic clock.
type Real struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc calls time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
