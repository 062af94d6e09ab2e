package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/paxlock/paxlock/bench/cpuquota"
	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/report"
)

// errBudgetSkipped is applyBudgets' error when -cpu-budget-optional let
// the run go no further on a machine without writable cgroups.
var errBudgetSkipped = errors.New("equal-machines run skipped")

// budgets are the CPU limits of an equal-machines run, one per server
// process.
type budgets struct {
	limits map[string][]*cpuquota.Limit // by system
}

// applyBudgets, with -cpu-budget > 0, holds every server process that the
// meters found to the same CPU budget, each in a cgroup of its own, and
// records the budget in rep. A process two systems share (paxlock,
// paxlock-tls and paxlock-api are one cluster) is limited once, under
// the first. Without writable cgroups it fails, or with
// -cpu-budget-optional returns errBudgetSkipped after saying why.
func applyBudgets(f *flags, meters map[string]load.CPUMeter, order []load.Locker, rep *report.Report) (*budgets, error) {
	bs := &budgets{limits: map[string][]*cpuquota.Limit{}}
	if *f.cpuBudget <= 0 {
		return bs, nil
	}
	b := cpuquota.Budget{Cores: *f.cpuBudget, Period: *f.cpuPeriod}
	if err := b.Validate(); err != nil {
		return bs, fmt.Errorf("-cpu-budget/-cpu-period: %w", err)
	}
	c, err := cpuquota.Detect()
	if err != nil {
		if *f.cpuOptional {
			slog.Warn("equal-machines run skipped: no writable cgroup CPU controller here (run as root on a cgroup v1 cpu or v2 cpu hierarchy)", "err", err)
			return bs, errBudgetSkipped
		}
		return bs, fmt.Errorf("-cpu-budget: %w", err)
	}
	info := &report.CPUBudget{Cores: b.Cores, PeriodMs: float64(b.Period.Microseconds()) / 1000,
		Mechanism: mechanism(c.Version), Procs: map[string]int{}}
	seen := map[int]bool{}
	for _, lk := range order {
		m, ok := meters[lk.Name()]
		if !ok {
			continue
		}
		s := m.ReadCPU()
		if s.ServerErr != "" {
			return bs, fmt.Errorf("-cpu-budget: %s's server processes: %s", lk.Name(), s.ServerErr)
		}
		for _, p := range s.Procs {
			if seen[p.PID] {
				continue
			}
			seen[p.PID] = true
			l, err := c.Apply(lk.Name()+"-"+strconv.Itoa(p.PID), p.PID, b)
			if err != nil {
				return bs, fmt.Errorf("-cpu-budget: %s pid %d: %w", lk.Name(), p.PID, err)
			}
			bs.limits[lk.Name()] = append(bs.limits[lk.Name()], l)
			info.Procs[lk.Name()]++
		}
	}
	rep.CPUBudget = info
	slog.Info("equal machines", "budget", b.String(), "cgroup", info.Mechanism, "procs", fmt.Sprint(info.Procs))
	return bs, nil
}

func mechanism(v cpuquota.Version) string {
	if v == cpuquota.V1 {
		return "cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us"
	}
	return "cgroup v2 cpu.max"
}

// throttled records in rep how often each system's processes were
// throttled for spending their budget.
func (bs *budgets) throttled(rep *report.Report) {
	if rep.CPUBudget == nil {
		return
	}
	rep.CPUBudget.ThrottledPeriods = map[string]uint64{}
	for sys, ls := range bs.limits {
		var n uint64
		for _, l := range ls {
			p, _, err := l.Throttled()
			if err != nil {
				slog.Warn("cannot read throttling", "system", sys, "err", err)
				continue
			}
			n += p
		}
		rep.CPUBudget.ThrottledPeriods[sys] = n
	}
}

// release lets every limited process go back to its own cgroup.
func (bs *budgets) release() {
	for sys, ls := range bs.limits {
		for _, l := range ls {
			if err := l.Release(); err != nil {
				slog.Warn("cannot release CPU budget", "system", sys, "err", err)
			}
		}
	}
}
