package soak

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/paxlock/paxlock/bench/report"
)

// The target of the soak (docs/design.md): the mean throughput of the
// last LastShare of the run within Tolerance of the first FirstShare's.
const (
	FirstShare = 5.0 / 30
	LastShare  = 10.0 / 30
	Tolerance  = 0.10
)

// Summary compares the start of a soak with its end, for the system under
// soak and for the baseline.
type Summary struct {
	// First and Last are the mean throughput of the system's points in
	// the first FirstShare and the last LastShare of the run; Ratio is
	// Last/First.
	First, Last, Ratio float64
	// FirstP99Ms and LastP99Ms are the mean P99 in the same windows.
	FirstP99Ms, LastP99Ms float64
	// FirstCPUus and LastCPUus are the mean server CPU per op (0: unknown).
	FirstCPUus, LastCPUus float64
	// BaseFirst, BaseLast and BaseRatio are the baseline's (0: none ran in
	// a window).
	BaseFirst, BaseLast, BaseRatio float64
	// Met says Ratio is at least 1 - Tolerance.
	Met bool
}

// Summarize computes the summary of a soak's points.
func Summarize(pts []Point) Summary {
	var end time.Duration
	for _, p := range pts {
		end = max(end, p.At)
	}
	firstTo := time.Duration(float64(end) * FirstShare)
	lastFrom := end - time.Duration(float64(end)*LastShare)
	var s Summary
	var f, l, bf, bl meanOf
	for _, p := range pts {
		start := p.At - p.Window
		inFirst, inLast := start < firstTo, p.At > lastFrom
		switch {
		case p.Baseline && inFirst:
			bf.add(p)
		case p.Baseline && inLast:
			bl.add(p)
		case inFirst:
			f.add(p)
		case inLast:
			l.add(p)
		}
	}
	s.First, s.FirstP99Ms, s.FirstCPUus = f.mean()
	s.Last, s.LastP99Ms, s.LastCPUus = l.mean()
	s.BaseFirst, _, _ = bf.mean()
	s.BaseLast, _, _ = bl.mean()
	if s.First > 0 {
		s.Ratio = s.Last / s.First
		s.Met = s.Ratio >= 1-Tolerance
	}
	if s.BaseFirst > 0 {
		s.BaseRatio = s.BaseLast / s.BaseFirst
	}
	return s
}

// meanOf averages points.
type meanOf struct {
	n, ops, p99, cpu float64
	cpuN             float64
}

func (m *meanOf) add(p Point) {
	m.n++
	m.ops += p.OpsPerSec
	m.p99 += p.P99Ms
	if p.ServerCPUPerOpUs > 0 {
		m.cpu += p.ServerCPUPerOpUs
		m.cpuN++
	}
}

func (m *meanOf) mean() (ops, p99, cpu float64) {
	if m.n == 0 {
		return 0, 0, 0
	}
	if m.cpuN > 0 {
		cpu = m.cpu / m.cpuN
	}
	return m.ops / m.n, m.p99 / m.n, cpu
}

// Markdown renders the soak: what ran, the summary against the target,
// and every point.
func Markdown(title, setup string, pts []Point) string {
	var b strings.Builder
	s := Summarize(pts)
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", title, setup)
	verdict := "not met"
	if s.Met {
		verdict = "met"
	}
	fmt.Fprintf(&b, "**Last %.0f%% of the run against the first %.0f%%**: %s → %s ops/s (%s; target ≥ %.0f%%: %s); P99 %s → %s ms; servers' CPU %s → %s µs/op.\n",
		LastShare*100, FirstShare*100, report.FormatOps(s.First), report.FormatOps(s.Last), pct(s.Ratio),
		(1-Tolerance)*100, verdict, report.FormatMs(s.FirstP99Ms), report.FormatMs(s.LastP99Ms),
		report.FormatUs(s.FirstCPUus), report.FormatUs(s.LastCPUus))
	if s.BaseFirst > 0 {
		fmt.Fprintf(&b, "The baseline in the same windows: %s → %s ops/s (%s).\n",
			report.FormatOps(s.BaseFirst), report.FormatOps(s.BaseLast), pct(s.BaseRatio))
	}
	b.WriteString("\n| minute | system | ops/s | p99 ms | p999 ms | errors | server CPU µs/op | RSS MiB | data MiB | L0 files | compaction debt MiB | WAL MiB | memtables MiB | heap MiB |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range pts {
		fmt.Fprintf(&b, "| %.1f | %s | %s | %s | %s | %d | %s |", p.Minute(), p.System, report.FormatOps(p.OpsPerSec),
			report.FormatMs(p.P99Ms), report.FormatMs(p.P999Ms), p.Errors, report.FormatUs(p.ServerCPUPerOpUs))
		if n := p.Nodes; n != nil {
			st := n.Storage
			fmt.Fprintf(&b, " %s | %s | %s | %s | %s | %s | %s |\n", mib(float64(n.RSSBytes)), mib(float64(n.DataBytes)),
				num(st, "l0_files"), mibOf(st, "compaction_debt_bytes"), mibOf(st, "wal_bytes"),
				mibOf(st, "memtable_bytes"), mibOf(st, "heap_inuse_bytes"))
		} else {
			b.WriteString(" | | | | | | |\n")
		}
	}
	return b.String()
}

func pct(r float64) string {
	if r == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", r*100)
}

func mib(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }

func mibOf(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%.1f", v/(1<<20))
}

func num(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%.0f", v)
}

// Charts draws the soak: throughput of each system by minute, and the
// system's P99 and P999 by minute.
func Charts(title string, pts []Point) []report.NamedChart {
	bySys := map[string]*report.Series{}
	var order []string
	p99 := report.Series{Name: "p99", Markers: true}
	p999 := report.Series{Name: "p999", Markers: true, Dashed: true}
	for _, p := range pts {
		s := bySys[p.System]
		if s == nil {
			s = &report.Series{Name: report.DisplayName(p.System), Markers: true, Dashed: p.Baseline}
			bySys[p.System] = s
			order = append(order, p.System)
		}
		s.Points = append(s.Points, report.Point{X: p.Minute(), Y: p.OpsPerSec})
		if !p.Baseline && p.P99Ms > 0 && !math.IsNaN(p.P99Ms) {
			p99.Points = append(p99.Points, report.Point{X: p.Minute(), Y: p.P99Ms})
			p999.Points = append(p999.Points, report.Point{X: p.Minute(), Y: p.P999Ms})
		}
	}
	tput := report.Chart{Title: title + ": throughput by minute", XLabel: "minutes", YLabel: "ops/s", YFrom0: true}
	for i, name := range order {
		s := *bySys[name]
		s.Color = report.SystemColor(name, i)
		tput.Series = append(tput.Series, s)
	}
	lat := report.Chart{Title: title + ": acquire latency by minute", XLabel: "minutes", YLabel: "ms", YFrom0: true,
		Series: []report.Series{p99, p999}}
	return []report.NamedChart{{File: "soak-throughput.svg", Chart: tput}, {File: "soak-latency.svg", Chart: lat}}
}
