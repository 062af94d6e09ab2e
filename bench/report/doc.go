// Package report turns a benchmark suite's results into results.md (tables
// with paxlock / peer ratios), results.json and SVG plots (throughput vs
// workers, latency CDFs), drawn by this package without plotting libraries.
//
// # Files by job
//
//   - report.go: Report and System, what one invocation measured; writing
//     results.md, results.json and the plots.
//   - markdown.go: results.md's tables.
//   - cpu.go: the CPU columns (per op, per replicated command).
//   - machine.go: Machine, the computer a run used.
//   - charts.go: which plots are drawn from a report.
//   - svg.go: Chart, a line chart rendered as SVG.
package report
