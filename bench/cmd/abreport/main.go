// Command abreport summarizes a same-run A/B comparison of two paxlock
// builds made by bench/scripts/ab.sh: rounds of lockbench, each round
// running build A and build B (in alternating order) against a fresh
// cluster, each followed by Redis on the same machine.
//
// On a shared 2-core machine one run of either build varies by 15% or more
// from the next, so a single before/after pair says little. abreport
// therefore shows every round, each build's figures next to the Redis run
// that followed it (the same-round ratio cancels most of the machine's
// drift), and the medians over rounds:
//
//	abreport -a A-label -b B-label DIR
//
// DIR holds one lockbench output directory per round and side, named
// <round>-a and <round>-b (results.json inside).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/report"
)

func main() {
	a := flag.String("a", "A", "label of build A")
	b := flag.String("b", "B", "label of build B")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: abreport [-a label] [-b label] DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	rounds, err := readRounds(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "abreport:", err)
		os.Exit(1)
	}
	write(os.Stdout, *a, *b, rounds)
}

// errNoRounds: the directory holds no round with both sides' results.
var errNoRounds = errors.New("no complete round")

// round is one round's two lockbench reports.
type round struct {
	n    int
	a, b *report.Report
}

// readRounds reads dir/<n>-a/results.json and dir/<n>-b/results.json for
// every round n found, in order of n.
func readRounds(dir string) ([]round, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	byN := map[int]*round{}
	for _, e := range ents {
		num, side, ok := strings.Cut(e.Name(), "-")
		n, err := strconv.Atoi(num)
		if !e.IsDir() || !ok || err != nil || (side != "a" && side != "b") {
			continue
		}
		r, err := readReport(filepath.Join(dir, e.Name(), "results.json"))
		if err != nil {
			return nil, err
		}
		if byN[n] == nil {
			byN[n] = &round{n: n}
		}
		if side == "a" {
			byN[n].a = r
		} else {
			byN[n].b = r
		}
	}
	var out []round
	for _, r := range byN {
		if r.a != nil && r.b != nil {
			out = append(out, *r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (<n>-a and <n>-b with results.json) in %s", errNoRounds, dir)
	}
	slices.SortFunc(out, func(x, y round) int { return x.n - y.n })
	return out, nil
}

func readReport(path string) (*report.Report, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report.Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// side is one build's figures in one scenario of one round: paxlock's
// ops/s, its ratio to Redis's ops/s in the same round (0 without Redis),
// CPU µs per op and acquire p99.
type side struct {
	ops, ratio, cpu, p99 float64
	errors               int64
	ok                   bool
}

// peerOf is the system a round compares paxlock with: the first other
// system that ran (Redis by default; ab.sh's AB_PEER), by name and display
// name.
func peerOf(r *report.Report) (name, display string) {
	for _, s := range r.Systems {
		if s.Name != "paxlock" && s.Ran() {
			return s.Name, s.Display
		}
	}
	return "redis", "Redis"
}

// figures reads paxlock's and the peer's results of scenario sc from r.
func figures(r *report.Report, sc, peer string) side {
	var s side
	var redis float64
	for _, res := range r.Results {
		if res.Scenario.Name != sc || !res.Supported {
			continue
		}
		switch res.System {
		case "paxlock":
			s.ok = true
			s.ops = res.OpsPerSec.Median
			s.errors = res.ErrorCount()
			if res.CPU != nil {
				s.cpu = res.CPU.TotalUsPerOp
			}
			if res.Acquire != nil {
				s.p99 = res.Acquire.P99Ms
			}
		case peer:
			redis = res.OpsPerSec.Median
		}
	}
	if redis > 0 {
		s.ratio = s.ops / redis
	}
	return s
}

// scenarios lists the scenarios of the first round's A report, in order.
func scenarios(rs []round) []string {
	var out []string
	for _, res := range rs[0].a.Results {
		if !slices.Contains(out, res.Scenario.Name) {
			out = append(out, res.Scenario.Name)
		}
	}
	return out
}

func write(w io.Writer, la, lb string, rs []round) {
	peer, pd := peerOf(rs[0].a)
	fmt.Fprintf(w, "# A/B: %s (A) against %s (B), %d rounds\n\n", la, lb, len(rs))
	if rs[0].a.CPUBudget != nil {
		fmt.Fprintf(w, "Equal machines: %s\n\n", rs[0].a.CPUBudget)
	}
	for _, sc := range scenarios(rs) {
		fmt.Fprintf(w, "## %s\n\n", sc)
		fmt.Fprintf(w, "| round | A ops/s | A / %[1]s | A CPU µs/op | A acquire p99 ms | B ops/s | B / %[1]s | B CPU µs/op | B acquire p99 ms |\n", pd)
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		var as, bs []side
		for _, r := range rs {
			a, b := figures(r.a, sc, peer), figures(r.b, sc, peer)
			if !a.ok || !b.ok {
				continue
			}
			as, bs = append(as, a), append(bs, b)
			fmt.Fprintf(w, "| %d | %s | %s |\n", r.n,
				row(a), row(b))
		}
		if len(as) == 0 {
			fmt.Fprintf(w, "\nno round measured paxlock in %s\n\n", sc)
			continue
		}
		ma, mb := medians(as), medians(bs)
		fmt.Fprintf(w, "| **median** | %s | %s |\n\n", row(ma), row(mb))
		wins := 0
		for i := range as {
			if bs[i].ratio > as[i].ratio {
				wins++
			}
		}
		fmt.Fprintf(w, "B / A: ops/s %s, ratio to %s %s, CPU per op %s; B's ratio to %s above A's in %d of %d rounds.\n",
			change(ma.ops, mb.ops), pd, change(ma.ratio, mb.ratio), change(ma.cpu, mb.cpu), pd, wins, len(as))
		if ea, eb := errs(as), errs(bs); ea+eb > 0 {
			fmt.Fprintf(w, "Errors: A %d, B %d (see each round's results.md).\n", ea, eb)
		}
		fmt.Fprintln(w)
	}
}

// medians is the per-field median of ss (the ratio's is the median of the
// rounds' ratios, not the ratio of the medians).
func medians(ss []side) side {
	pick := func(f func(side) float64) float64 {
		vs := make([]float64, len(ss))
		for i, s := range ss {
			vs[i] = f(s)
		}
		return load.SpreadOf(vs).Median
	}
	return side{ok: true, ops: pick(func(s side) float64 { return s.ops }), ratio: pick(func(s side) float64 { return s.ratio }),
		cpu: pick(func(s side) float64 { return s.cpu }), p99: pick(func(s side) float64 { return s.p99 })}
}

func errs(ss []side) int64 {
	var n int64
	for _, s := range ss {
		n += s.errors
	}
	return n
}

// row is one side's cells in the report's formats: ops/s, ratio to
// Redis, CPU µs per op, acquire p99 ms ("n/a" where not measured).
func row(s side) string {
	cells := []string{"n/a", "n/a", "n/a", "n/a"}
	if s.ops > 0 {
		cells[0] = report.FormatOps(s.ops)
	}
	if s.ratio > 0 {
		cells[1] = report.FormatRatio(s.ratio, 1)
	}
	if s.cpu > 0 {
		cells[2] = report.FormatUs(s.cpu)
	}
	if s.p99 > 0 {
		cells[3] = report.FormatMs(s.p99)
	}
	return strings.Join(cells, " | ")
}

// change is b relative to a as a signed percentage.
func change(a, b float64) string {
	if a == 0 || b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", (b/a-1)*100)
}
