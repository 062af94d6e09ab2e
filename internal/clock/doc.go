// Package clock is the monotonic clock that the runtimes take their time
// from (the Paxos host's ticks and leases, the lock groups' deadlines), so
// that a test can run them on a Fake one.
package clock
