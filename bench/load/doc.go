// Package load is the load generator of paxlock's benchmark harness: the
// Locker interface every system under test implements, the scenarios, the
// workers that drive them, latency histograms, the overlap guard, and the
// suite that runs every system through the same code and summarizes the runs.
//
// # Files by job
//
//   - locker.go: Locker, the interface every system implements, and Mode.
//   - scenario.go: the scenarios and their kinds.
//   - run.go: one run of one system and scenario: the workers, the
//     measured window, RunResult.
//   - suite.go: Suite, every system through the same scenarios, systems'
//     order rotated between repeats.
//   - result.go: Spread and the summaries of repeated runs.
//   - hist.go: latency histograms.
//   - guard.go: Guard, the overlap and token checks on hot keys.
//   - cpu.go: CPUMeter, the CPU time of the servers and the generator.
package load
