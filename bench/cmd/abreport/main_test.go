package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/report"
)

// writeRound writes dir/<name>/results.json with paxlock's and Redis's
// uncontended ops/s and paxlock's CPU per op.
func writeRound(t *testing.T, dir, name string, ops, redis, cpu float64) {
	t.Helper()
	sc := load.Scenario{Name: "uncontended", Kind: load.Uncontended, Workers: 64}
	r := report.Report{Results: []load.Result{
		{Scenario: sc, System: "paxlock", Supported: true, OpsPerSec: load.Spread{Median: ops, N: 1},
			CPU: &load.CPU{TotalUsPerOp: cpu}, Acquire: &load.Latency{P99Ms: 5}},
		{Scenario: sc, System: "redis", Supported: true, OpsPerSec: load.Spread{Median: redis, N: 1}},
	}}
	raw, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, "results.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReportMediansAndWins: three rounds where B beats A's same-round
// ratio to Redis twice; the report shows each round, the medians (of the
// ratios, not the ratio of medians) and the count of B's wins.
func TestReportMediansAndWins(t *testing.T) {
	dir := t.TempDir()
	writeRound(t, dir, "1-a", 10000, 40000, 100) // 0.25
	writeRound(t, dir, "1-b", 12000, 40000, 90)  // 0.30
	writeRound(t, dir, "2-a", 14000, 40000, 110) // 0.35
	writeRound(t, dir, "2-b", 11000, 40000, 95)  // 0.275
	writeRound(t, dir, "3-a", 9000, 30000, 120)  // 0.30
	writeRound(t, dir, "3-b", 12000, 30000, 80)  // 0.40
	writeRound(t, dir, "4-a", 9000, 30000, 120)  // no 4-b: an incomplete round is left out
	rs, err := readRounds(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d rounds, want 3 (round 4 has no B)", len(rs))
	}
	var out strings.Builder
	write(&out, "base", "change", rs)
	got := out.String()
	for _, want := range []string{
		"| 1 | 10,000 | 0.25× | 100 | 5.00 | 12,000 | 0.30× | 90.0 | 5.00 |",
		"| **median** | 10,000 | 0.30× | 110 | 5.00 | 12,000 | 0.30× | 90.0 | 5.00 |",
		"B / A: ops/s +20.0%, ratio to Redis +0.0%, CPU per op -18.2%; B's ratio to Redis above A's in 2 of 3 rounds.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// TestNoRounds: a directory without a complete round is an error.
func TestNoRounds(t *testing.T) {
	dir := t.TempDir()
	writeRound(t, dir, "1-a", 10000, 40000, 100)
	if _, err := readRounds(dir); !errors.Is(err, errNoRounds) {
		t.Fatalf("readRounds: %v, want errNoRounds", err)
	}
}
