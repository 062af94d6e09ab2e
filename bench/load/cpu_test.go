package load_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/memlock"
)

// countingMeter adds one second of server CPU and half a second of client
// CPU per reading.
type countingMeter struct {
	mu    sync.Mutex
	n     int
	procs []load.ProcID
	err   string
}

func (m *countingMeter) ReadCPU() load.CPUSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	s := load.CPUSample{At: time.Now(), Client: time.Duration(m.n) * time.Second / 2, ServerErr: m.err}
	if m.err == "" {
		s.Servers, s.Procs = time.Duration(m.n)*time.Second, m.procs
	}
	return s
}

func TestRunMeasuredReadsTheWindowEdges(t *testing.T) {
	lk := memlock.New(memlock.Options{})
	m := &countingMeter{procs: []load.ProcID{{PID: 1, Start: 9}, {PID: 2, Start: 9}}}
	res, err := load.RunMeasured(context.Background(), lk, scenario(load.Uncontended, 2), nil, m)
	if err != nil {
		t.Fatal(err)
	}
	c := res.CPU
	if c == nil {
		t.Fatal("no CPU figures")
	}
	if m.n != 2 || c.ServerSeconds != 1 || c.ClientSeconds != 0.5 || c.ServerProcs != 2 || c.ServerNote != "" {
		t.Errorf("%d readings, CPU %+v", m.n, c)
	}
	if c.Seconds <= 0 {
		t.Errorf("readings %v apart", c.Seconds)
	}
	plain, err := load.Run(context.Background(), lk, scenario(load.Uncontended, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.CPU != nil {
		t.Error("CPU figures without a meter")
	}
}

func TestCPUBetween(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := load.CPUSample{At: t0, Servers: 2 * time.Second, Client: time.Second, Procs: []load.ProcID{{PID: 7, Start: 1}}}
	b := load.CPUSample{At: t0.Add(4 * time.Second), Servers: 5 * time.Second, Client: 3 * time.Second, Procs: []load.ProcID{{PID: 7, Start: 1}}}
	c := load.CPUBetween(a, b)
	if c.Seconds != 4 || c.ServerSeconds != 3 || c.ClientSeconds != 2 || c.ServerProcs != 1 || c.ServerNote != "" {
		t.Errorf("between: %+v", c)
	}
	restarted := b
	restarted.Procs = []load.ProcID{{PID: 7, Start: 2}} // same pid, new process
	if c := load.CPUBetween(a, restarted); !strings.Contains(c.ServerNote, "changed") || c.ServerProcs != 0 || c.ClientSeconds != 2 {
		t.Errorf("a restarted server: %+v", c)
	}
	gone := b
	gone.ServerErr = "pid 7 from n1.pid: no such process"
	if c := load.CPUBetween(a, gone); c.ServerNote != gone.ServerErr {
		t.Errorf("a vanished server: %+v", c)
	}
}

func TestMergeCPUPerOp(t *testing.T) {
	sc := scenario(load.Uncontended, 4)
	sc.Duration = 2 * time.Second
	run := func(ops int64, readSec, server, client float64, note string) *load.RunResult {
		r := &load.RunResult{Scenario: sc, System: "x", Window: sc.Duration, Ops: ops,
			Acquire: hdrhistogram.New(1, int64(time.Hour), 3), Release: hdrhistogram.New(1, int64(time.Hour), 3),
			CPU: &load.RunCPU{Seconds: readSec, ServerSeconds: server, ClientSeconds: client, ServerProcs: 3, ServerNote: note}}
		return r
	}
	// 1.5 s of servers and 0.5 s of client for 10,000 ops, and the same
	// for 30,000 ops read over 4 s (twice the window: scaled by half).
	res := load.Merge([]*load.RunResult{run(10000, 2, 1.5, 0.5, ""), run(30000, 4, 3.0, 1.0, "")})
	c := res.CPU
	if c == nil {
		t.Fatal("no CPU")
	}
	// servers 1.5 + 1.5 = 3 s over 40,000 ops = 75 µs; client 1 s = 25 µs.
	near := func(got, want float64) bool { return got > want-1e-9 && got < want+1e-9 }
	if !near(c.ServerUsPerOp, 75) || !near(c.ClientUsPerOp, 25) || !near(c.TotalUsPerOp, 100) || c.ServerProcs != 3 {
		t.Errorf("per op: %+v", c)
	}
	if !near(c.ServerCores, 0.75) || !near(c.ClientCores, 0.25) {
		t.Errorf("cores: %+v", c)
	}
	c.SetCommands(2)
	if c.CommandsPerOp != 2 || !near(c.UsPerCommand, 50) {
		t.Errorf("per command: %+v", c)
	}
	if len(res.Repeats) != 2 || res.Repeats[0].CPU == nil {
		t.Error("repeats lost their CPU")
	}

	res = load.Merge([]*load.RunResult{run(10000, 2, 1.5, 0.5, ""), run(10000, 2, 0, 0.5, "pid file: gone")})
	c = res.CPU
	if c.ServersKnown() || !strings.Contains(c.ServerNote, "pid file: gone (in 1 of 2 repeats)") || c.TotalUsPerOp != 0 || !near(c.ClientUsPerOp, 50) {
		t.Errorf("one repeat without servers: %+v", c)
	}
	c.SetCommands(2)
	if c.CommandsPerOp != 0 {
		t.Error("per-command figure without the servers")
	}
	if res := load.Merge([]*load.RunResult{run(0, 2, 1, 1, "")}); res.CPU != nil {
		t.Errorf("CPU per op of no op: %+v", res.CPU)
	}
}

func TestCommandsPerOp(t *testing.T) {
	caps := load.Caps{CommandsPerLock: 2, CommandsPerRenew: 1}
	for _, c := range []struct {
		kind load.Kind
		want int
	}{{load.Uncontended, 2}, {load.RenewHeavy, 2 + 3}, {load.Contended, 0}, {load.ReadWrite, 0}} {
		if got := caps.CommandsPerOp(scenario(c.kind, 1)); got != c.want {
			t.Errorf("%s: %d commands per op, want %d", c.kind, got, c.want)
		}
	}
	if got := (load.Caps{}).CommandsPerOp(scenario(load.Uncontended, 1)); got != 0 {
		t.Errorf("unstated: %d", got)
	}
}

func TestMeasureIdle(t *testing.T) {
	m := &countingMeter{procs: []load.ProcID{{PID: 1}}}
	bad := &countingMeter{err: "no pid file"}
	out, err := load.MeasureIdle(context.Background(), []string{"a", "none", "b"},
		map[string]load.CPUMeter{"a": m, "b": bad}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].System != "a" || out[1].System != "b" {
		t.Fatalf("idle %+v", out)
	}
	if out[0].ServerCores <= 0 || out[0].ServerProcs != 1 || out[1].ServerNote != "no pid file" {
		t.Errorf("idle %+v", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := load.MeasureIdle(ctx, []string{"a"}, map[string]load.CPUMeter{"a": m}, time.Hour); err == nil {
		t.Error("no error after cancel")
	}
}
