// Package load is the load generator of paxlock's benchmark harness: the
// Locker interface every system under test implements, the scenarios, the
// workers that drive them, latency histograms, the overlap guard, and the
// suite that runs every system through the same code and summarizes the runs.
package load
