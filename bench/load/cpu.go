package load

import (
	"context"
	"fmt"
	"time"
)

// CPUMeter reads how much CPU time a system's server processes and the load
// generator (where the clients run) have used so far. The suite reads it at
// the start and at the end of every measured window. Reading must be cheap
// (a few /proc files) and safe from any goroutine.
type CPUMeter interface {
	ReadCPU() CPUSample
}

// ProcID identifies one process across two readings: a pid and the start
// time the kernel gives it (so a reused pid is not taken for the same
// process).
type ProcID struct {
	PID   int
	Start uint64
}

// CPUSample is one reading of a CPUMeter.
type CPUSample struct {
	// At is when the sample was read.
	At time.Time
	// Servers is the CPU time (user + system) used so far by the system's
	// server processes together; Procs lists them. ServerErr, if set, says
	// why they could not be read, and Servers is then meaningless. No
	// processes and no ServerErr means the system has no server process (the
	// in-memory fake runs inside the load generator).
	Servers   time.Duration
	Procs     []ProcID
	ServerErr string
	// Client is the CPU time used so far by the load generator's process.
	Client time.Duration
}

// RunCPU is the CPU time one run's measured window cost, from the readings
// at its start and end.
type RunCPU struct {
	// Seconds is the wall time between the two readings.
	Seconds float64 `json:"seconds"`
	// ServerSeconds is the CPU time of all server processes together
	// (ServerProcs of them); ServerNote, if set, says why it is unknown.
	ServerSeconds float64 `json:"server_cpu_s"`
	ServerProcs   int     `json:"server_procs"`
	ServerNote    string  `json:"server_note,omitempty"`
	// ClientSeconds is the CPU time of the load generator's process.
	ClientSeconds float64 `json:"client_cpu_s"`
}

// CPUBetween is the CPU time spent between two samples of one meter. The
// servers are unknown if either sample could not read them, or if the set
// of processes changed between them (a server restarted).
func CPUBetween(a, b CPUSample) *RunCPU {
	c := &RunCPU{
		Seconds:       b.At.Sub(a.At).Seconds(),
		ClientSeconds: (b.Client - a.Client).Seconds(),
		ServerProcs:   len(b.Procs),
	}
	switch {
	case a.ServerErr != "":
		c.ServerNote = a.ServerErr
	case b.ServerErr != "":
		c.ServerNote = b.ServerErr
	case !sameProcs(a.Procs, b.Procs):
		c.ServerNote = fmt.Sprintf("server processes changed during the window (%v, then %v)", pids(a.Procs), pids(b.Procs))
	default:
		c.ServerSeconds = (b.Servers - a.Servers).Seconds()
	}
	if c.ServerNote != "" {
		c.ServerProcs = 0
	}
	return c
}

func sameProcs(a, b []ProcID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func pids(ps []ProcID) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}

// CPU is what a result's measured windows cost in CPU, over all repeats:
// microseconds of CPU per op (an op is one acquire + renews + release) and
// the mean use in cores.
type CPU struct {
	// ServerProcs is how many server processes were measured. ServerNote,
	// if set, says why the servers could not be measured; the server and
	// total figures are then 0 and must be shown as n/a.
	ServerProcs int    `json:"server_procs"`
	ServerNote  string `json:"server_note,omitempty"`
	// Microseconds of CPU per op: all server processes together, the load
	// generator (clients), and both.
	ServerUsPerOp float64 `json:"server_us_per_op"`
	ClientUsPerOp float64 `json:"client_us_per_op"`
	TotalUsPerOp  float64 `json:"total_us_per_op"`
	// Mean CPU use during the windows, in cores (1 = one core busy).
	ServerCores float64 `json:"server_cores"`
	ClientCores float64 `json:"client_cores"`
	// CommandsPerOp is how many replicated commands one op commits, where
	// the system states it (paxlock, fresh keys: acquire + renews + release);
	// UsPerCommand is TotalUsPerOp divided by it. Both 0 otherwise.
	CommandsPerOp int     `json:"commands_per_op,omitempty"`
	UsPerCommand  float64 `json:"total_us_per_command,omitempty"`
}

// ServersKnown reports whether the server figures were measured.
func (c *CPU) ServersKnown() bool { return c != nil && c.ServerNote == "" }

// SetCommands records how many replicated commands one op commits (0: not
// stated) and derives the CPU per command.
func (c *CPU) SetCommands(n int) {
	if c == nil || n <= 0 || !c.ServersKnown() {
		return
	}
	c.CommandsPerOp = n
	c.UsPerCommand = c.TotalUsPerOp / float64(n)
}

// mergeCPU sums the CPU of runs into per-op figures: CPU time over the
// measured windows divided by the ops counted in them. The readings are a
// few microseconds to milliseconds off the window's edges, so each run's CPU
// is scaled from the readings' interval to the window. It returns nil when
// no run was measured or no op completed.
func mergeCPU(runs []*RunResult) *CPU {
	var ops int64
	var window, server, client float64
	var note string
	procs, measured, unknown := 0, 0, 0
	for _, r := range runs {
		c := r.CPU
		if c == nil || c.Seconds <= 0 {
			continue
		}
		measured++
		scale := r.Window.Seconds() / c.Seconds
		ops += r.Ops
		window += r.Window.Seconds()
		client += c.ClientSeconds * scale
		if c.ServerNote != "" {
			unknown++
			if note == "" {
				note = c.ServerNote
			}
			continue
		}
		server += c.ServerSeconds * scale
		procs = max(procs, c.ServerProcs)
	}
	if measured == 0 || ops == 0 || window <= 0 {
		return nil
	}
	out := &CPU{
		ServerProcs:   procs,
		ClientUsPerOp: client / float64(ops) * 1e6,
		ClientCores:   client / window,
	}
	if unknown > 0 {
		out.ServerProcs = 0
		out.ServerNote = note
		if measured > 1 {
			out.ServerNote = fmt.Sprintf("%s (in %d of %d repeats)", note, unknown, measured)
		}
		return out
	}
	out.ServerUsPerOp = server / float64(ops) * 1e6
	out.ServerCores = server / window
	out.TotalUsPerOp = out.ServerUsPerOp + out.ClientUsPerOp
	return out
}

// IdleCPU is the CPU use of a system while nothing runs against it, in
// cores, measured once before the suite with every system connected.
type IdleCPU struct {
	System      string  `json:"system"`
	Seconds     float64 `json:"seconds"`
	ServerProcs int     `json:"server_procs"`
	ServerCores float64 `json:"server_cores"`
	ServerNote  string  `json:"server_note,omitempty"`
	// ClientCores is the load generator's use (the same process for every
	// system: its idle connections, keep-alives and timers of all adapters).
	ClientCores float64 `json:"client_cores"`
}

// MeasureIdle reads every meter, waits d (or until ctx is done) and reads
// them again: the servers' and the load generator's CPU use with no load,
// in the order of systems (names without a meter are left out). It returns
// ctx's error if ctx ends first.
func MeasureIdle(ctx context.Context, systems []string, meters map[string]CPUMeter, d time.Duration) ([]IdleCPU, error) {
	first := make(map[string]CPUSample, len(meters))
	for _, s := range systems {
		if m := meters[s]; m != nil {
			first[s] = m.ReadCPU()
		}
	}
	pause(ctx, d)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []IdleCPU
	for _, s := range systems {
		m := meters[s]
		if m == nil {
			continue
		}
		c := CPUBetween(first[s], m.ReadCPU())
		if c.Seconds <= 0 {
			continue
		}
		id := IdleCPU{System: s, Seconds: c.Seconds, ServerProcs: c.ServerProcs, ServerNote: c.ServerNote,
			ClientCores: c.ClientSeconds / c.Seconds}
		if c.ServerNote == "" {
			id.ServerCores = c.ServerSeconds / c.Seconds
		}
		out = append(out, id)
	}
	return out, nil
}
