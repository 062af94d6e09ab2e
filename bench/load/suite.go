package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Suite runs every system through the same scenarios with the same code,
// interleaving the systems within each repeat (and rotating who goes first)
// so that a slow drift of the machine does not favour one of them.
type Suite struct {
	// Lockers are the systems under test, in report order.
	Lockers []Locker
	// Scenarios run Repeats times each.
	Scenarios []Scenario
	Repeats   int
	// Sweep scenarios (throughput vs workers) run SweepRepeats times each.
	Sweep        []Scenario
	SweepRepeats int
	// Pause between runs lets the servers settle (background compaction,
	// GC, closing sessions).
	Pause time.Duration
	// Meters, if set, read the CPU time of each system's servers and of the
	// load generator (by system name) at the edges of every measured window;
	// a system without a meter gets no CPU figures.
	Meters map[string]CPUMeter
	// Progress, if set, shows a live status line.
	Progress *Progress
	// Log receives one line per finished run; nil means slog.Default().
	Log *slog.Logger
}

type plannedRun struct {
	sc     Scenario
	lk     Locker
	repeat int
	of     int
}

// Run runs the suite and returns one Result per (scenario, workers, system),
// scenarios first, then the sweep, in plan order. A run that fails is logged
// and noted in its Result; the others go on. Cancelling ctx stops the suite.
func (s *Suite) Run(ctx context.Context) ([]Result, error) {
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	plan, unsupported := s.plan()
	type key struct {
		name    string
		workers int
		system  string
	}
	runs := map[key][]*RunResult{}
	failures := map[key][]string{}
	var eta time.Duration
	for _, p := range plan {
		eta += p.sc.Warmup + p.sc.Duration + s.Pause + time.Second
	}
	for i, p := range plan {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		label := fmt.Sprintf("[%d/%d] %-11s %-9s %3dw rep %d/%d", i+1, len(plan), p.sc.Name, p.lk.Name(), p.sc.Workers, p.repeat+1, p.of)
		live := &Live{}
		var stop func()
		if s.Progress != nil {
			stop = s.Progress.Watch(label, eta, live)
		}
		sc := p.sc
		sc.Seed += uint64(p.repeat) // same key sequence for every system in one repeat
		res, err := RunMeasured(ctx, p.lk, sc, live, s.Meters[p.lk.Name()])
		if stop != nil {
			stop()
		}
		eta -= p.sc.Warmup + p.sc.Duration + s.Pause + time.Second
		k := key{p.sc.Name, p.sc.Workers, p.lk.Name()}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			log.Error("run failed", "run", strings.Join(strings.Fields(label), " "), "err", err)
			failures[k] = append(failures[k], err.Error())
		} else {
			res.Repeat = p.repeat
			runs[k] = append(runs[k], res)
			attrs := []any{"scenario", p.sc.Name, "system", p.lk.Name(), "workers", p.sc.Workers,
				"repeat", p.repeat + 1, "ops_per_sec", int64(res.OpsPerSec()),
				"acquire_p99_ms", p99ms(res), "errors", sumErrors(res.Errors), "overlaps", res.Overlaps}
			if c := mergeCPU([]*RunResult{res}); c != nil {
				if c.ServersKnown() {
					attrs = append(attrs, "cpu_us_per_op_servers", int64(c.ServerUsPerOp+0.5))
				} else {
					attrs = append(attrs, "cpu_servers", "n/a: "+c.ServerNote)
				}
				attrs = append(attrs, "cpu_us_per_op_client", int64(c.ClientUsPerOp+0.5))
			}
			log.Info("run done", attrs...)
		}
		if s.Pause > 0 && i+1 < len(plan) {
			pause(ctx, s.Pause)
		}
	}

	// Assemble results in a stable order: scenario (plan order), then system.
	var out []Result
	seen := map[key]bool{}
	for _, p := range plan {
		k := key{p.sc.Name, p.sc.Workers, p.lk.Name()}
		if seen[k] {
			continue
		}
		seen[k] = true
		if rs := runs[k]; len(rs) > 0 {
			r := Merge(rs)
			r.CPU.SetCommands(p.lk.Caps().CommandsPerOp(p.sc))
			if f := failures[k]; len(f) > 0 {
				r.Note = fmt.Sprintf("%d of %d repeats failed: %s", len(f), len(f)+len(rs), f[0])
			}
			out = append(out, r)
		} else {
			out = append(out, Result{Scenario: p.sc, System: p.lk.Name(), Supported: true,
				Note: "failed: " + strings.Join(failures[k], "; ")})
		}
	}
	out = append(out, unsupported...)
	sortResults(out, s.Lockers, append(append([]Scenario{}, s.Scenarios...), s.Sweep...))
	return out, nil
}

// plan lists the runs: for each repeat, each scenario, each system (rotated
// by repeat). Unsupported combinations become n/a results instead.
func (s *Suite) plan() ([]plannedRun, []Result) {
	var plan []plannedRun
	var unsupported []Result
	add := func(scs []Scenario, repeats int) {
		if repeats < 1 {
			repeats = 1
		}
		for _, sc := range scs {
			for _, lk := range s.Lockers {
				if ok, why := sc.Supported(lk.Caps()); !ok {
					unsupported = append(unsupported, Unsupported(sc, lk.Name(), why))
				}
			}
		}
		for rep := range repeats {
			for _, sc := range scs {
				n := len(s.Lockers)
				for j := range n {
					lk := s.Lockers[(j+rep)%n]
					if ok, _ := sc.Supported(lk.Caps()); ok {
						plan = append(plan, plannedRun{sc: sc, lk: lk, repeat: rep, of: repeats})
					}
				}
			}
		}
	}
	add(s.Scenarios, s.Repeats)
	add(s.Sweep, s.SweepRepeats)
	return plan, unsupported
}

// sortResults orders results by scenario (as given), then system (as given).
func sortResults(rs []Result, lockers []Locker, scs []Scenario) {
	scIdx := func(r Result) int {
		for i, sc := range scs {
			if sc.Name == r.Scenario.Name && sc.Workers == r.Scenario.Workers {
				return i
			}
		}
		return len(scs)
	}
	sysIdx := func(r Result) int {
		for i, lk := range lockers {
			if lk.Name() == r.System {
				return i
			}
		}
		return len(lockers)
	}
	// insertion sort: stable and the slices are short
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0; j-- {
			a, b := rs[j-1], rs[j]
			if scIdx(a) < scIdx(b) || (scIdx(a) == scIdx(b) && sysIdx(a) <= sysIdx(b)) {
				break
			}
			rs[j-1], rs[j] = b, a
		}
	}
}

func p99ms(r *RunResult) float64 {
	if r.Acquire == nil || r.Acquire.TotalCount() == 0 {
		return 0
	}
	return nsToMs(float64(r.Acquire.ValueAtQuantile(99)))
}

func sumErrors(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// Progress draws a status line for the run in progress: redrawn in place on
// a terminal, printed every Every otherwise.
type Progress struct {
	W     io.Writer
	TTY   bool
	Every time.Duration // for a non-terminal; default 10s

	mu sync.Mutex
}

// Watch shows live's progress under label until the returned stop is
// called. eta is the estimated time left for the whole suite.
func (p *Progress) Watch(label string, eta time.Duration, live *Live) (stop func()) {
	every := p.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	if p.TTY {
		every = 500 * time.Millisecond
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	started := time.Now()
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.print(label, eta-time.Since(started), live, false)
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
		p.print(label, eta-time.Since(started), live, true)
	}
}

func (p *Progress) print(label string, eta time.Duration, live *Live, final bool) {
	ops, errs, elapsed, warmup, total, measuring := live.Snapshot()
	var state string
	switch {
	case total == 0:
		state = "opening sessions"
	case !measuring:
		state = fmt.Sprintf("warm-up %4.1f/%.0fs", elapsed.Seconds(), warmup.Seconds())
	default:
		m := min(elapsed, total) - warmup
		rate := 0.0
		if m > 0 {
			rate = float64(ops) / m.Seconds()
		}
		state = fmt.Sprintf("measured %4.1f/%.0fs %9d ops %9.0f ops/s %d err", m.Seconds(), (total - warmup).Seconds(), ops, rate, errs)
	}
	line := fmt.Sprintf("%s  %s  (suite ETA %s)", label, state, max(eta, 0).Round(time.Second))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.TTY {
		if final {
			_, _ = fmt.Fprint(p.W, "\r\x1b[K") // the run's log line replaces it; a progress line may be lost
		} else {
			fmt.Fprintf(p.W, "\r\x1b[K%s", line)
		}
		return
	}
	if !final {
		fmt.Fprintln(p.W, line)
	}
}

// ErrNoSystems is returned when no system is left to run.
var ErrNoSystems = errors.New("no system to run")
