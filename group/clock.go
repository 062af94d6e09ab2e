package group

import "github.com/paxlock/paxlock/internal/clock"

// Clock is the monotonic clock the master measures deadlines with (TTLs,
// waits, watches). RealClock is the process's; tests use a fake one. The
// functions the workers schedule with AfterFunc only post to a worker, so
// they return at once.
type Clock = clock.Clock

// Timer is a call scheduled by Clock.AfterFunc. The worker ignores what
// its Stop reports: a call that runs anyway finds nothing due.
type Timer = clock.Timer

// RealClock is the process's monotonic clock.
type RealClock = clock.Real
