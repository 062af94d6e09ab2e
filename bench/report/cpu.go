package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/paxlock/paxlock/bench/load"
)

// cpuMethod explains the CPU figures in the Method section.
const cpuMethod = `- CPU: at the start and at the end of every measured window the harness reads the CPU time (user + system, every thread) of each server process of the system under test — from ` + "`/proc/<pid>/stat`" + ` (utime + stime, in clock ticks of ` + "`getconf CLK_TCK`" + `, 10 ms on Linux) of the pids in the start scripts' pid files (paxlock: ` + "`n1.pid`…`n3.pid`" + ` under the cluster's RUNDIR; Redis, etcd, ZooKeeper: ` + "`bench/scripts/peers.sh`" + `'s pid files under $PEERS_DIR), each checked to be the expected program — and of the load generator process, where all clients run (getrusage, microseconds). CPU µs/op is that time, summed over the repeats, divided by the ops counted in the windows; "servers" adds all of a system's server processes, "client" is the load generator, "total" both. Cores are the mean use during the windows. A server that could not be found or restarted during a window makes its figures n/a, with the reason. The other systems' servers sit idle during a run and are not counted (their idle use is in the idle table), The load generator's figure includes the idle cost of the other systems' open clients (connections, keep-alives), which the idle table measures.
- CPU per replicated command (paxlock, fresh keys): one op commits an acquire and a release (plus each renew), so the total CPU per op divided by that count. On hot keys a waiter's grant rides on the holder's release, so the count per op is not fixed there and the column is left empty.
`

// hasCPU reports whether any result carries CPU figures.
func (r *Report) hasCPU() bool {
	return slices.ContainsFunc(r.Results, func(x load.Result) bool { return x.CPU != nil }) || len(r.IdleCPU) > 0
}

func groupHasCPU(g group) bool {
	for _, res := range g.results {
		if res.CPU != nil {
			return true
		}
	}
	return false
}

func groupHasCommands(g group) bool {
	for _, res := range g.results {
		if res.CPU != nil && res.CPU.CommandsPerOp > 0 {
			return true
		}
	}
	return false
}

// cpuCell is a summary cell: "total (servers + client)" µs per op.
func cpuCell(x load.Result) string {
	c := x.CPU
	switch {
	case c == nil:
		return "—"
	case !c.ServersKnown():
		return "n/a (client " + fmtUs(c.ClientUsPerOp) + ")"
	}
	return fmt.Sprintf("%s (%s + %s)", fmtUs(c.TotalUsPerOp), fmtUs(c.ServerUsPerOp), fmtUs(c.ClientUsPerOp))
}

// perProcCell is a summary cell: the servers' µs of CPU per op divided
// among their processes, what one node (or one peer server) spends.
func perProcCell(x load.Result) string {
	c := x.CPU
	if !c.ServersKnown() || c.ServerProcs == 0 {
		return "—"
	}
	unit := "procs"
	if c.ServerProcs == 1 {
		unit = "proc"
	}
	return fmt.Sprintf("%s (%d %s)", fmtUs(c.ServerUsPerOp/float64(c.ServerProcs)), c.ServerProcs, unit)
}

// commandCell is a summary cell: µs of CPU per replicated command.
func commandCell(x load.Result) string {
	c := x.CPU
	if c == nil || c.CommandsPerOp == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%d per op)", fmtUs(c.UsPerCommand), c.CommandsPerOp)
}

// cpuSplitCell is a detail cell: "servers / client / total" µs per op.
func cpuSplitCell(c *load.CPU) string {
	switch {
	case c == nil:
		return "—"
	case !c.ServersKnown():
		return "n/a / " + fmtUs(c.ClientUsPerOp) + " / n/a"
	}
	return fmt.Sprintf("%s / %s / %s", fmtUs(c.ServerUsPerOp), fmtUs(c.ClientUsPerOp), fmtUs(c.TotalUsPerOp))
}

// coresCell is a detail cell: "servers / client" cores.
func coresCell(c *load.CPU) string {
	switch {
	case c == nil:
		return "—"
	case !c.ServersKnown():
		return "n/a / " + fmtCores(c.ClientCores)
	}
	return fmtCores(c.ServerCores) + " / " + fmtCores(c.ClientCores)
}

// cpuNotes lists, under the summary, why some CPU figures are n/a.
func (r *Report) cpuNotes(b *strings.Builder, groups []group) {
	var notes []string
	for _, g := range groups {
		for _, s := range r.ran() {
			if res, ok := g.results[s.Name]; ok && res.CPU != nil && !res.CPU.ServersKnown() {
				notes = append(notes, fmt.Sprintf("- %s, %s %dw: servers' CPU n/a: %s", s.Display, g.sc.Name, g.sc.Workers, res.CPU.ServerNote))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("CPU not measured:\n\n" + strings.Join(notes, "\n") + "\n\n")
	}
}

// cpuDetailNotes says, under a scenario's table, how many server processes
// were measured and what one replicated command cost.
func (r *Report) cpuDetailNotes(b *strings.Builder, g group, ran []System) {
	var parts []string
	for _, s := range ran {
		res, ok := g.results[s.Name]
		if !ok || res.CPU == nil {
			continue
		}
		c := res.CPU
		switch {
		case !c.ServersKnown():
			parts = append(parts, fmt.Sprintf("%s servers n/a (%s)", s.Display, c.ServerNote))
		case c.ServerProcs == 0:
			parts = append(parts, s.Display+" has no server process")
		default:
			word := "processes"
			if c.ServerProcs == 1 {
				word = "process"
			}
			parts = append(parts, fmt.Sprintf("%s %d server %s", s.Display, c.ServerProcs, word))
		}
	}
	if len(parts) > 0 {
		b.WriteString("CPU measured over: " + strings.Join(parts, ", ") + "; client = the load generator process.")
		for _, s := range ran {
			if res, ok := g.results[s.Name]; ok && res.CPU != nil && res.CPU.CommandsPerOp > 0 {
				fmt.Fprintf(b, " %s commits %d replicated commands per op: %s µs of CPU per command (servers %s + client %s).",
					s.Display, res.CPU.CommandsPerOp, fmtUs(res.CPU.UsPerCommand),
					fmtUs(res.CPU.ServerUsPerOp/float64(res.CPU.CommandsPerOp)), fmtUs(res.CPU.ClientUsPerOp/float64(res.CPU.CommandsPerOp)))
			}
		}
		b.WriteString("\n\n")
	}
}

// sweepCPUTable is the CPU per op at each worker count of the sweep.
func (r *Report) sweepCPUTable(b *strings.Builder, sweep []group, ran []System) {
	if !slices.ContainsFunc(sweep, groupHasCPU) {
		return
	}
	cmds := slices.ContainsFunc(sweep, groupHasCommands)
	b.WriteString("CPU µs per op at each point: total (servers + client).\n\n| workers |")
	for _, s := range ran {
		fmt.Fprintf(b, " %s |", s.Display)
	}
	if cmds {
		b.WriteString(" paxlock µs per command |")
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(ran)))
	if cmds {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, g := range sweep {
		fmt.Fprintf(b, "| %d |", g.sc.Workers)
		for _, s := range ran {
			res, ok := g.results[s.Name]
			if !ok || !res.Supported {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(b, " %s |", cpuCell(res))
		}
		if cmds {
			res, ok := g.results[Baseline]
			if !ok || res.CPU == nil || res.CPU.CommandsPerOp == 0 {
				b.WriteString(" — |")
			} else {
				fmt.Fprintf(b, " %s |", fmtUs(res.CPU.UsPerCommand))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// idleTable shows every system's CPU use with no load.
func (r *Report) idleTable(b *strings.Builder) {
	if len(r.IdleCPU) == 0 {
		return
	}
	fmt.Fprintf(b, "## Idle CPU\n\nEvery system connected and idle for %.0f s before the runs, in cores (1 = one core busy).\n\n", r.IdleCPU[0].Seconds)
	b.WriteString("| system | server processes | servers (cores) |\n|---|---:|---:|\n")
	for _, id := range r.IdleCPU {
		if id.ServerNote != "" {
			fmt.Fprintf(b, "| %s | n/a | n/a: %s |\n", DisplayName(id.System), cell(id.ServerNote))
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %.3f |\n", DisplayName(id.System), id.ServerProcs, id.ServerCores)
	}
	fmt.Fprintf(b, "\nThe load generator, holding every system's client (connections, keep-alives, timers): %.3f cores.\n\n", r.IdleCPU[0].ClientCores)
}

// cpuChart plots total CPU µs per op against workers, from the sweep.
func (r *Report) cpuChart() (Chart, bool) {
	gs := r.groups(true)
	if len(gs) < 2 || !slices.ContainsFunc(gs, groupHasCPU) {
		return Chart{}, false
	}
	slices.SortFunc(gs, func(a, b group) int { return a.sc.Workers - b.sc.Workers })
	c := Chart{
		Title:    "CPU per op vs workers (servers + load generator)",
		Subtitle: "uncontended, fresh keys; CPU time of all server processes and the client process per acquire + release",
		XLabel:   "concurrent workers (log scale)",
		YLabel:   "CPU µs per op (log scale)",
		XLog:     true,
		XTight:   true,
		YLog:     true,
	}
	for _, g := range gs {
		c.XTicks = append(c.XTicks, float64(g.sc.Workers))
	}
	for i, s := range r.ran() {
		ser := Series{Name: s.Display, Color: systemColor(s.Name, i), Markers: true}
		for _, g := range gs {
			res, ok := g.results[s.Name]
			if !ok || !res.CPU.ServersKnown() || res.CPU.TotalUsPerOp <= 0 {
				continue
			}
			ser.Points = append(ser.Points, Point{X: float64(g.sc.Workers), Y: res.CPU.TotalUsPerOp})
		}
		c.Series = append(c.Series, ser)
	}
	return c, true
}

// fmtUs prints microseconds with about three significant digits.
func fmtUs(v float64) string {
	switch {
	case v >= 100:
		return fmtInt(int64(math.Round(v)))
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fmtCores prints a CPU use in cores.
func fmtCores(v float64) string {
	if v < 0.01 && v > 0 {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
