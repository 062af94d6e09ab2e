package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/paxlock/paxlock/bench/load"
)

// NamedChart is a chart with the file name it is written to.
type NamedChart struct {
	File  string
	Chart Chart
}

// Charts returns the plots: throughput vs workers (from the sweep, or from
// uncontended runs at several worker counts) and one latency CDF per
// scenario.
func (r *Report) Charts() []NamedChart {
	var out []NamedChart
	if c, ok := r.throughputChart(); ok {
		out = append(out, NamedChart{File: "throughput-vs-workers.svg", Chart: c})
	}
	if c, ok := r.cpuChart(); ok {
		out = append(out, NamedChart{File: "cpu-per-op-vs-workers.svg", Chart: c})
	}
	for _, g := range r.groups(false) {
		if c, ok := r.cdfChart(g); ok {
			out = append(out, NamedChart{File: fmt.Sprintf("latency-cdf-%s.svg", g.sc.Name), Chart: c})
		}
	}
	return out
}

func (r *Report) throughputChart() (Chart, bool) {
	gs := r.groups(true)
	source := "uncontended, fresh keys"
	if len(gs) < 2 {
		gs = nil
		for _, g := range r.groups(false) {
			if g.sc.Kind == load.Uncontended {
				gs = append(gs, g)
			}
		}
		source = "uncontended runs"
	}
	if len(gs) < 2 {
		return Chart{}, false
	}
	slices.SortFunc(gs, func(a, b group) int { return a.sc.Workers - b.sc.Workers })
	c := Chart{
		Title:  "Throughput vs workers (one op = acquire + release)",
		XLabel: "concurrent workers (log scale)",
		YLabel: "ops/s",
		XLog:   true,
		XTight: true,
		YFrom0: true,
	}
	sc, repeats := gs[0].sc, 1
	for _, res := range gs[0].results {
		repeats = max(repeats, res.OpsPerSec.N)
	}
	c.Subtitle = fmt.Sprintf("%s; %v per point after %v warm-up; median of %s",
		source, sc.Duration, sc.Warmup, plural(repeats, "repeat"))
	if repeats > 1 {
		c.Subtitle += ", whiskers min–max"
	}
	for _, g := range gs {
		c.XTicks = append(c.XTicks, float64(g.sc.Workers))
	}
	for i, s := range r.ran() {
		ser := Series{Name: s.Display, Color: systemColor(s.Name, i), Markers: true}
		for _, g := range gs {
			res, ok := g.results[s.Name]
			if !ok || !res.Supported || res.OpsPerSec.N == 0 {
				continue
			}
			p := Point{X: float64(g.sc.Workers), Y: res.OpsPerSec.Median}
			if res.OpsPerSec.N > 1 {
				p.YLow, p.YHigh = res.OpsPerSec.Min, res.OpsPerSec.Max
			}
			ser.Points = append(ser.Points, p)
		}
		c.Series = append(c.Series, ser)
	}
	// Systems an order of magnitude apart vanish at the bottom of a linear
	// axis: switch to log then.
	lo, hi := math.Inf(1), 0.0
	for _, ser := range c.Series {
		for _, p := range ser.Points {
			if p.Y > 0 {
				lo, hi = min(lo, p.Y), max(hi, p.Y)
			}
		}
	}
	if hi > 0 && hi/lo > 10 {
		c.YLog, c.YFrom0, c.YLabel = true, false, "ops/s (log scale)"
	}
	return c, true
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func (r *Report) cdfChart(g group) (Chart, bool) {
	c := Chart{
		Title:    fmt.Sprintf("Latency CDF — %s, %d workers", g.sc.Name, g.sc.Workers),
		Subtitle: "solid: acquire (includes waiting for the lock); dashed: release; all repeats merged",
		XLabel:   "latency, ms (log scale)",
		YLabel:   "fraction of ops at or below",
		XLog:     true,
		YFrom0:   true,
	}
	drawn := false
	for i, s := range r.ran() {
		res, ok := g.results[s.Name]
		if !ok || !res.Supported {
			continue
		}
		color := systemColor(s.Name, i)
		for _, part := range []struct {
			name   string
			l      *load.Latency
			dashed bool
		}{{"acquire", res.Acquire, false}, {"release", res.Release, true}} {
			if part.l == nil {
				continue
			}
			ser := Series{Name: s.Display + " " + part.name, Color: color, Dashed: part.dashed}
			for _, p := range part.l.CDF {
				ser.Points = append(ser.Points, Point{X: p.Ms, Y: p.Frac})
			}
			c.Series = append(c.Series, ser)
			drawn = true
		}
	}
	return c, drawn
}
