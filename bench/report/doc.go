// Package report turns a benchmark suite's results into results.md (tables
// with paxlock / peer ratios), results.json and SVG plots (throughput vs
// workers, latency CDFs), drawn by this package without plotting libraries.
package report
