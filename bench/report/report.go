package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/paxlock/paxlock/bench/load"
)

// Report is everything one invocation of the harness measured, with its
// conditions.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's 1, 5 and 15 minute
	// load averages when the run started and ended: other work on the
	// machine shows here.
	LoadAvgStart string        `json:"loadavg_start,omitempty"`
	LoadAvgEnd   string        `json:"loadavg_end,omitempty"`
	Systems      []System      `json:"systems"`
	Repeats      int           `json:"repeats"`
	Results      []load.Result `json:"results"`
	// IdleCPU is every system's CPU use with no load, measured before the
	// runs with all systems connected.
	IdleCPU []load.IdleCPU `json:"idle_cpu,omitempty"`
	// CPUBudget, set for an equal-machines run, is the CPU budget every
	// server process was held to.
	CPUBudget *CPUBudget `json:"cpu_budget,omitempty"`
}

// CPUBudget is an equal-machines run's budget: every server process of
// every system held to the same cgroup CPU quota, the load generator
// outside them.
type CPUBudget struct {
	Cores    float64 `json:"cores"`
	PeriodMs float64 `json:"period_ms"`
	// Mechanism is the cgroup files that enforced it.
	Mechanism string `json:"mechanism"`
	// Procs is how many server processes each system had limited.
	Procs map[string]int `json:"procs"`
	// ThrottledPeriods is, per system, how many periods the kernel
	// throttled its processes (all together) for spending the budget.
	ThrottledPeriods map[string]uint64 `json:"throttled_periods,omitempty"`
}

// String says the budget in one sentence for the report's heading.
func (c *CPUBudget) String() string {
	quota := c.Cores * c.PeriodMs
	var ps []string
	for _, n := range slices.Sorted(maps.Keys(c.Procs)) {
		t := ""
		if th, ok := c.ThrottledPeriods[n]; ok {
			t = fmt.Sprintf(", throttled in %d periods", th)
		}
		ps = append(ps, fmt.Sprintf("%s %d%s", n, c.Procs[n], t))
	}
	return fmt.Sprintf("every server process held to %g core (%g ms of CPU per %g ms, %s), as if each ran on a machine of its own; the load generator outside the budgets. Processes limited: %s.",
		c.Cores, quota, c.PeriodMs, c.Mechanism, strings.Join(ps, "; "))
}

// System describes one system of the run, including those that could not
// run (Status says why).
type System struct {
	Name    string   `json:"name"`
	Display string   `json:"display"`
	Version string   `json:"version,omitempty"`
	Status  string   `json:"status"` // "ok" or why it did not run
	Wait    string   `json:"wait,omitempty"`
	Fencing bool     `json:"fencing"`
	Notes   []string `json:"notes,omitempty"`
}

// Ran reports whether the system took part.
func (s System) Ran() bool { return s.Status == StatusOK }

// StatusOK is the Status of a system that ran.
const StatusOK = "ok"

// SystemFrom describes a Locker that ran.
func SystemFrom(lk load.Locker, version string) System {
	c := lk.Caps()
	return System{Name: lk.Name(), Display: lk.Display(), Version: version, Status: StatusOK,
		Wait: c.Wait, Fencing: c.Fencing, Notes: c.Notes}
}

// displayNames are the names used when a system did not run and so has no
// Locker to ask.
var displayNames = map[string]string{"paxlock": "paxlock", "paxlock-tls": "paxlock (TLS clients)", "paxlock-lq": "paxlock (local queue)", "paxlock-api": "paxlock (API)", "redis": "Redis", "redis-aof": "Redis (AOF, fsync always)", "etcd": "etcd", "zk": "ZooKeeper", "mem": "in-memory fake"}

// DisplayName returns the human name of a system's short name.
func DisplayName(name string) string {
	if d, ok := displayNames[name]; ok {
		return d
	}
	return name
}

// Baseline is the system the ratio columns compare against the others.
const Baseline = "paxlock"

// WriteAll writes results.md, results.json and the SVG plots into dir and
// returns the paths written.
func (r *Report) WriteAll(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	write := func(name string, data []byte) error {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		written = append(written, p)
		return nil
	}
	charts := r.Charts()
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := write("results.json", append(js, '\n')); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(charts))
	for _, c := range charts {
		names = append(names, c.File)
		if err := write(c.File, c.Chart.SVG()); err != nil {
			return written, err
		}
	}
	if err := write("results.md", []byte(r.Markdown(names))); err != nil {
		return written, err
	}
	return written, nil
}

// ran returns the systems that ran, in report order.
func (r *Report) ran() []System {
	var out []System
	for _, s := range r.Systems {
		if s.Ran() {
			out = append(out, s)
		}
	}
	return out
}

// hasBaseline reports whether paxlock took part, which turns the ratio
// columns on.
func (r *Report) hasBaseline() bool {
	return slices.ContainsFunc(r.Systems, func(s System) bool { return s.Name == Baseline && s.Ran() })
}

// group is one scenario (name and workers) with its results per system.
type group struct {
	sc      load.Scenario
	results map[string]load.Result
}

// groups splits the results into scenarios, in order of first appearance;
// sweep reports whether to take the sweep runs or the others.
func (r *Report) groups(sweep bool) []group {
	var gs []group
	for _, res := range r.Results {
		if (res.Scenario.Name == "sweep") != sweep {
			continue
		}
		i := slices.IndexFunc(gs, func(g group) bool {
			return g.sc.Name == res.Scenario.Name && g.sc.Workers == res.Scenario.Workers
		})
		if i < 0 {
			gs = append(gs, group{sc: res.Scenario, results: map[string]load.Result{}})
			i = len(gs) - 1
		}
		gs[i].results[res.System] = res
	}
	return gs
}

// systemColor gives each system a stable color across plots.
func systemColor(name string, i int) string {
	switch name {
	case "paxlock":
		return "#c62828"
	case "redis":
		return "#1565c0"
	case "redis-aof":
		return "#00838f"
	case "etcd":
		return "#2e7d32"
	case "zk":
		return "#6a1b9a"
	}
	palette := []string{"#ef6c00", "#00838f", "#5d4037", "#546e7a"}
	return palette[i%len(palette)]
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return d.String()
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// SystemColor is the colour a system's series gets in every chart (i is
// its position, for systems without a colour of their own).
func SystemColor(name string, i int) string { return systemColor(name, i) }
