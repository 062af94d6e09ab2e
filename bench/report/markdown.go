package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/paxlock/paxlock/bench/load"
)

// Markdown renders the report; svgs are the plot files to embed (relative
// to the Markdown file).
func (r *Report) Markdown(svgs []string) string {
	var b strings.Builder
	ran := r.ran()
	base := r.hasBaseline()
	var peers []System // systems the baseline is compared with
	for _, s := range ran {
		if s.Name != Baseline {
			peers = append(peers, s)
		}
	}

	b.WriteString("# Lock service benchmark: paxlock, Redis, etcd, ZooKeeper\n\n")
	fmt.Fprintf(&b, "Run %s, took %s. ", r.Started.UTC().Format("2006-01-02 15:04 MST"), fmtDur(r.Finished.Sub(r.Started)))
	fmt.Fprintf(&b, "**Machine:** %s. Servers and load generator share this machine and talk over loopback, so absolute numbers are not comparable with multi-host published figures; compare systems within this run.\n\n", r.Machine)
	if r.LoadAvgStart != "" {
		fmt.Fprintf(&b, "Load average (1, 5, 15 min) at start: %s; at end: %s (on %d cores; anything above that means other work competed with the run).\n\n",
			r.LoadAvgStart, r.LoadAvgEnd, r.Machine.Cores)
	}
	if r.CPUBudget != nil {
		fmt.Fprintf(&b, "**Equal machines:** %s\n\n", r.CPUBudget)
	}
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}

	// Systems.
	b.WriteString("## Systems\n\n")
	b.WriteString("| system | version | blocked acquire waits by | fencing token | setup and caveats |\n|---|---|---|---|---|\n")
	for _, s := range r.Systems {
		if !s.Ran() {
			fmt.Fprintf(&b, "| %s | — | — | — | **not run:** %s |\n", s.Display, cell(s.Status))
			continue
		}
		fence := "no"
		if s.Fencing {
			fence = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", s.Display, cell(s.Version), cell(s.Wait), fence, cell(strings.Join(s.Notes, "; ")))
	}
	b.WriteString("\n")
	if !base {
		b.WriteString("paxlock did not take part in this run, so the table shows the peers alone; the paxlock / peer ratio columns appear when it does.\n\n")
	}

	groups := r.groups(false)
	sweep := r.groups(true)

	// Summary with ratios.
	if len(groups) > 0 {
		b.WriteString("## Summary\n\n")
		r.summaryTable(&b, groups, ran, peers, base)
	}

	// Correctness.
	b.WriteString("## Correctness guard\n\n")
	r.guardSummary(&b)

	// Details.
	for _, g := range groups {
		fmt.Fprintf(&b, "## %s — %d workers\n\n%s.\n\n", g.sc.Name, g.sc.Workers, capitalize(g.sc.Describe()))
		r.detailTable(&b, g, ran)
	}

	if len(sweep) > 0 {
		r.sweepTable(&b, sweep, ran, peers, base)
	}

	if len(svgs) > 0 {
		b.WriteString("## Plots\n\n")
		for _, f := range svgs {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(f, ".svg"), f)
		}
	}

	r.idleTable(&b)
	r.noiseTable(&b)

	b.WriteString("## Method\n\n")
	b.WriteString(`- One op is one acquire plus one release (plus the renews in the renew scenario), as WLock's benchmark counts. The same load generator drives every system through the same interface; only the adapter (the system's usual Go client and lock recipe) differs.
- Each run opens one session per worker before the clock starts, runs a warm-up that is not counted, then a measured window. An op counts if its release completes inside the window; ops/s is those ops divided by the window.
- Latencies come from HdrHistograms (1 ns to 1 h, 3 significant digits); the percentiles of a row merge all its repeats. Acquire latency includes any time spent waiting for the lock, so in hot-key scenarios it is the wait.
- Systems take turns within each repeat, and the turn order rotates between repeats, so a drift of the machine does not favour one of them. Noise is shown as min–max over the repeats.
- Errors are counted by phase and kind (timeout, not held, unavailable, network, other); acquires cut short by the end of a run are not errors.
- The guard: for every hot key an atomic holder word is set after acquire returns and cleared before release is sent; a second holder seen while it is set is an overlap. The guard watches the whole run, warm-up included. Where a system returns fencing tokens, a token of one key that does not increase is counted too.
- Fairness (hot-key scenarios): the spread of acquisitions per worker (min / median / max per run) and Jain's index (1 = perfectly even).
`)
	if r.hasCPU() {
		b.WriteString(cpuMethod)
	}
	return b.String()
}

// summaryTable writes the summary table: a scenario's rows of metrics
// with a column per system that ran and, with base, paxlock's ratio to
// each peer; then the notes on the CPU figures.
func (r *Report) summaryTable(b *strings.Builder, groups []group, ran, peers []System, base bool) {
	summaryHeader(b, ran, peers, base)
	for _, g := range groups {
		for i, m := range r.summaryMetrics(g) {
			summaryRow(b, g, i, m, ran, peers, base)
		}
	}
	b.WriteString("\n")
	if base {
		b.WriteString("Ratios are paxlock's value divided by the peer's: above 1× is better for ops/s, below 1× is better for latency and CPU.\n\n")
	}
	r.cpuNotes(b, groups)
}

// summaryHeader writes the summary table's header: a column per system
// that ran and, with base, one per peer for the ratio to paxlock.
func summaryHeader(b *strings.Builder, ran, peers []System, base bool) {
	b.WriteString("| scenario | metric |")
	for _, s := range ran {
		fmt.Fprintf(b, " %s |", s.Display)
	}
	if base {
		for _, p := range peers {
			fmt.Fprintf(b, " paxlock / %s |", p.Display)
		}
	}
	b.WriteString("\n|---|---|")
	for range ran {
		b.WriteString("---:|")
	}
	if base {
		for range peers {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
}

// summaryMetric is one row of a scenario in the summary table.
type summaryMetric struct {
	name string
	get  func(load.Result) (float64, bool)
	// cell, if set, renders a supported result's cell instead of get.
	cell func(load.Result) string
}

// summaryMetrics are the summary table's rows for g: ops/s and acquire
// p99 always, renew p99 for the renew scenario, and CPU where measured.
func (r *Report) summaryMetrics(g group) []summaryMetric {
	waitName := "acquire p99 (ms)"
	if g.sc.Hot() {
		waitName = "acquire wait p99 (ms)"
	}
	ms := []summaryMetric{
		{fmt.Sprintf("ops/s (median of %d)", r.repeatsOf(g)), func(x load.Result) (float64, bool) {
			return x.OpsPerSec.Median, x.OpsPerSec.N > 0
		}, nil},
		{waitName, func(x load.Result) (float64, bool) {
			if x.Acquire == nil {
				return 0, false
			}
			return x.Acquire.P99Ms, true
		}, nil},
	}
	if g.sc.Kind == load.RenewHeavy {
		ms = append(ms, summaryMetric{"renew p99 (ms)", func(x load.Result) (float64, bool) {
			if x.Renew == nil {
				return 0, false
			}
			return x.Renew.P99Ms, true
		}, nil})
	}
	if groupHasCPU(g) {
		ms = append(ms, summaryMetric{"CPU µs/op: total (servers + client)", func(x load.Result) (float64, bool) {
			if !x.CPU.ServersKnown() {
				return 0, false
			}
			return x.CPU.TotalUsPerOp, true
		}, cpuCell})
		ms = append(ms, summaryMetric{"servers' CPU µs/op per server process", func(x load.Result) (float64, bool) {
			if !x.CPU.ServersKnown() || x.CPU.ServerProcs == 0 {
				return 0, false
			}
			return x.CPU.ServerUsPerOp / float64(x.CPU.ServerProcs), true
		}, perProcCell})
		if groupHasCommands(g) {
			ms = append(ms, summaryMetric{"CPU µs per replicated command", func(x load.Result) (float64, bool) {
				if x.CPU == nil || x.CPU.CommandsPerOp == 0 {
					return 0, false
				}
				return x.CPU.UsPerCommand, true
			}, commandCell})
		}
	}
	return ms
}

// summaryRow writes metric m of g, the i-th of its rows, for every system
// that ran and, with base, its ratios to paxlock.
func summaryRow(b *strings.Builder, g group, i int, m summaryMetric, ran, peers []System, base bool) {
	label := ""
	if i == 0 {
		label = fmt.Sprintf("%s, %dw", g.sc.Name, g.sc.Workers)
	}
	fmt.Fprintf(b, "| %s | %s |", label, m.name)
	for _, s := range ran {
		res, ok := g.results[s.Name]
		switch v, has := m.get(res); {
		case !ok:
			b.WriteString(" — |")
		case !res.Supported:
			b.WriteString(" n/a |")
		case m.cell != nil:
			fmt.Fprintf(b, " %s |", m.cell(res))
		case !has:
			b.WriteString(" failed |")
		case i == 0:
			fmt.Fprintf(b, " %s |", fmtOps(v))
		default:
			fmt.Fprintf(b, " %s |", fmtMs(v))
		}
	}
	if base {
		bres, bok := g.results[Baseline]
		bv, bhas := m.get(bres)
		for _, p := range peers {
			pres, pok := g.results[p.Name]
			pv, phas := m.get(pres)
			if !bok || !pok || !bres.Supported || !pres.Supported || !bhas || !phas {
				b.WriteString(" n/a |")
				continue
			}
			fmt.Fprintf(b, " %s |", fmtRatio(bv, pv))
		}
	}
	b.WriteString("\n")
}

func (r *Report) repeatsOf(g group) int {
	n := 0
	for _, res := range g.results {
		n = max(n, res.OpsPerSec.N)
	}
	return n
}

func (r *Report) guardSummary(b *strings.Builder) {
	var bad []string
	guarded := 0
	for _, res := range r.Results {
		if !res.Supported || !res.Scenario.Hot() {
			continue
		}
		guarded++
		if res.Overlaps > 0 || res.TokenRegressions > 0 {
			bad = append(bad, fmt.Sprintf("%s in %s (%dw): %d overlapping holds, %d fencing-token regressions",
				DisplayName(res.System), res.Scenario.Name, res.Scenario.Workers, res.Overlaps, res.TokenRegressions))
		}
	}
	switch {
	case guarded == 0:
		b.WriteString("No hot-key scenario ran, so the guard had nothing to watch.\n\n")
	case len(bad) == 0:
		fmt.Fprintf(b, "No overlapping holds and no fencing-token regressions observed (%d guarded system × scenario results).\n\n", guarded)
	default:
		b.WriteString("**Overlapping holds observed:**\n\n")
		for _, s := range bad {
			fmt.Fprintf(b, "- %s\n", s)
		}
		b.WriteString("\n")
	}
}

func (r *Report) detailTable(b *strings.Builder, g group, ran []System) {
	renew := g.sc.Kind == load.RenewHeavy
	hot := g.sc.Hot()
	b.WriteString("| system | ops/s median [min–max] | acquire p50 / p90 / p99 / p99.9 ms | release p50 / p90 / p99 / p99.9 ms |")
	cols := 4
	if renew {
		b.WriteString(" renew p50 / p99 ms |")
		cols++
	}
	b.WriteString(" errors | overlaps |")
	cols += 2
	withCPU := groupHasCPU(g)
	if withCPU {
		b.WriteString(" CPU µs/op servers / client / total | CPU cores servers / client |")
		cols += 2
	}
	if hot {
		b.WriteString(" acquisitions per worker min / median / max | Jain | max wait ms |")
		cols += 3
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", cols-1) + "\n")
	var errLines []string
	for _, s := range ran {
		res, ok := g.results[s.Name]
		if !ok {
			continue
		}
		if !res.Supported || res.OpsPerSec.N == 0 {
			note := res.Note
			if note == "" {
				note = "no data"
			}
			fmt.Fprintf(b, "| %s | %s |%s\n", s.Display, cell(note), strings.Repeat(" — |", cols-2))
			continue
		}
		o := res.OpsPerSec
		opsCell := fmtOps(o.Median)
		if o.N > 1 {
			opsCell += fmt.Sprintf(" [%s–%s]", fmtOps(o.Min), fmtOps(o.Max))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |", s.Display, opsCell, fmtPcts(res.Acquire), fmtPcts(res.Release))
		if renew {
			if res.Renew != nil {
				fmt.Fprintf(b, " %s / %s |", fmtMs(res.Renew.P50Ms), fmtMs(res.Renew.P99Ms))
			} else {
				b.WriteString(" — |")
			}
		}
		fmt.Fprintf(b, " %s | %d |", fmtInt(res.ErrorCount()), res.Overlaps)
		if withCPU {
			fmt.Fprintf(b, " %s | %s |", cpuSplitCell(res.CPU), coresCell(res.CPU))
		}
		if hot {
			if f := res.Fairness; f != nil {
				fmt.Fprintf(b, " %s / %s / %s | %.3f | %s |", fmtOps(f.MinPerWorker), fmtOps(f.MedianPerWorker),
					fmtOps(f.MaxPerWorker), f.Jain, fmtMs(f.WaitMaxMs))
			} else {
				b.WriteString(" — | — | — |")
			}
		}
		b.WriteString("\n")
		keys := make([]string, 0, len(res.Errors))
		for k := range res.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			errLines = append(errLines, fmt.Sprintf("- %s: %s × %s — first: `%s`", s.Display, k,
				fmtInt(res.Errors[k]), strings.ReplaceAll(res.ErrorSamples[k], "`", "'")))
		}
		if res.Note != "" {
			errLines = append(errLines, fmt.Sprintf("- %s: %s", s.Display, res.Note))
		}
	}
	b.WriteString("\n")
	if withCPU {
		r.cpuDetailNotes(b, g, ran)
	}
	if len(errLines) > 0 {
		b.WriteString("Errors:\n\n" + strings.Join(errLines, "\n") + "\n\n")
	}
}

func (r *Report) sweepTable(b *strings.Builder, sweep []group, ran, peers []System, base bool) {
	slices.SortFunc(sweep, func(a, c group) int { return a.sc.Workers - c.sc.Workers })
	sc := sweep[0].sc
	fmt.Fprintf(b, "## Throughput vs workers\n\nUncontended, fresh random keys, %v measured after %v warm-up per point; ops/s (median of %d).\n\n",
		sc.Duration, sc.Warmup, r.repeatsOf(sweep[0]))
	b.WriteString("| workers |")
	for _, s := range ran {
		fmt.Fprintf(b, " %s |", s.Display)
	}
	if base {
		for _, p := range peers {
			fmt.Fprintf(b, " paxlock / %s |", p.Display)
		}
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(ran)))
	if base {
		b.WriteString(strings.Repeat("---:|", len(peers)))
	}
	b.WriteString("\n")
	for _, g := range sweep {
		fmt.Fprintf(b, "| %d |", g.sc.Workers)
		for _, s := range ran {
			res, ok := g.results[s.Name]
			if !ok || res.OpsPerSec.N == 0 {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(b, " %s |", fmtOps(res.OpsPerSec.Median))
		}
		if base {
			bres, bok := g.results[Baseline]
			for _, p := range peers {
				pres, pok := g.results[p.Name]
				if !bok || !pok || bres.OpsPerSec.N == 0 || pres.OpsPerSec.N == 0 {
					b.WriteString(" — |")
					continue
				}
				fmt.Fprintf(b, " %s |", fmtRatio(bres.OpsPerSec.Median, pres.OpsPerSec.Median))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	r.sweepCPUTable(b, sweep, ran)
}

// noiseTable lists every repeat's ops/s, so the run-to-run noise is visible.
func (r *Report) noiseTable(b *strings.Builder) {
	maxRep := 0
	for _, res := range r.Results {
		if res.Scenario.Name != "sweep" {
			maxRep = max(maxRep, len(res.Repeats))
		}
	}
	if maxRep < 2 {
		return
	}
	b.WriteString("## Noise: ops/s of each repeat\n\n| scenario | system |")
	for i := range maxRep {
		fmt.Fprintf(b, " #%d |", i+1)
	}
	b.WriteString(" (max − min) / median |\n|---|---|" + strings.Repeat("---:|", maxRep+1) + "\n")
	for _, res := range r.Results {
		if res.Scenario.Name == "sweep" || len(res.Repeats) == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s, %dw | %s |", res.Scenario.Name, res.Scenario.Workers, DisplayName(res.System))
		for i := range maxRep {
			if i < len(res.Repeats) {
				fmt.Fprintf(b, " %s |", fmtOps(res.Repeats[i].OpsPerSec))
			} else {
				b.WriteString(" — |")
			}
		}
		o := res.OpsPerSec
		if o.Median > 0 {
			fmt.Fprintf(b, " %.1f%% |\n", 100*(o.Max-o.Min)/o.Median)
		} else {
			b.WriteString(" — |\n")
		}
	}
	b.WriteString("\n")
}

// fmtPcts prints p50 / p90 / p99 / p99.9 of l.
func fmtPcts(l *load.Latency) string {
	if l == nil {
		return "—"
	}
	return fmt.Sprintf("%s / %s / %s / %s", fmtMs(l.P50Ms), fmtMs(l.P90Ms), fmtMs(l.P99Ms), fmtMs(l.P999Ms))
}

// fmtMs prints milliseconds with three significant digits.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v >= 0.001:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// fmtOps prints a rate rounded to an integer with thousands separators.
func fmtOps(v float64) string { return fmtInt(int64(math.Round(v))) }

func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func fmtRatio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// FormatOps, FormatMs, FormatUs and FormatRatio print rates, milliseconds,
// microseconds of CPU and a ratio as results.md does, for other tools that
// print the harness's figures (cmd/abreport).
func FormatOps(v float64) string { return fmtOps(v) }

// FormatMs prints milliseconds with three significant digits.
func FormatMs(v float64) string { return fmtMs(v) }

// FormatUs prints microseconds with about three significant digits.
func FormatUs(v float64) string { return fmtUs(v) }

// FormatRatio prints a/b as "0.45×" ("—" when b is 0).
func FormatRatio(a, b float64) string { return fmtRatio(a, b) }
