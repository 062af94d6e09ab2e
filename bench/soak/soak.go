// Package soak runs one lock service under continuous load for a long
// time and records, interval by interval, what a short benchmark hides:
// whether throughput and tail latency hold, what the servers' CPU per op,
// memory and disk do, and what the storage engine reports. A reference
// system (Redis) is run for a short window every few intervals, so that
// a change of the machine's speed (a noisy neighbour, thermal limits)
// shows in the reference too and is not taken for the system's own.
package soak

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/bench/load"
)

// Config is one soak.
type Config struct {
	// Locker is the system under soak; Meter reads its servers' CPU (nil:
	// no CPU figures) and Probe its nodes' memory, disk and storage
	// metrics (nil: none).
	Locker load.Locker
	Meter  load.CPUMeter
	Probe  Probe
	// Scenario is the load; its Duration is one interval (a point of the
	// record) and its Warmup is used before the first interval only, so
	// that the load is continuous from then on.
	Scenario load.Scenario
	// Total is how long the system under soak is loaded, baseline
	// windows not counted.
	Total time.Duration
	// Baseline is the reference system (nil: none), run for
	// BaselineDuration after every BaselineEvery intervals, and once
	// before the first so that the record starts with a reference.
	Baseline         load.Locker
	BaselineMeter    load.CPUMeter
	BaselineEvery    int
	BaselineDuration time.Duration
	// OnPoint, if set, is told of every point as it is recorded.
	OnPoint func(Point)
}

// Point is one interval of one system.
type Point struct {
	// System is the system's short name; Baseline marks the reference.
	System   string `json:"system"`
	Baseline bool   `json:"baseline,omitempty"`
	// At is when the interval ended, counted from the soak's start.
	At time.Duration `json:"at_ns"`
	// Window is the interval's measured time.
	Window time.Duration `json:"window_ns"`
	// OpsPerSec, the acquire latency's P99Ms and P999Ms, and the errors
	// of the interval.
	OpsPerSec float64 `json:"ops_per_sec"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	Errors    int64   `json:"errors"`
	// ServerCPUPerOpUs is the servers' CPU time per op, in microseconds (0:
	// unknown).
	ServerCPUPerOpUs float64 `json:"server_cpu_per_op_us,omitempty"`
	// Nodes is what the probe read right after the interval (nil: none).
	Nodes *NodeStats `json:"nodes,omitempty"`
}

// Minute is the point's end in minutes from the soak's start.
func (p Point) Minute() float64 { return p.At.Minutes() }

// Probe reads the state of the system's server processes.
type Probe interface {
	Sample(ctx context.Context) (NodeStats, error)
}

// NodeStats is one reading of a Probe, summed over the nodes.
type NodeStats struct {
	// RSSBytes is the resident memory of the server processes.
	RSSBytes int64 `json:"rss_bytes"`
	// DataBytes is the size of their data directories.
	DataBytes int64 `json:"data_bytes"`
	// Storage holds storage-engine gauges and counters read from the
	// nodes' metrics, by name (summed over nodes), such as
	// "l0_files" or "compaction_debt_bytes"; see Scrape.
	Storage map[string]float64 `json:"storage,omitempty"`
	// Err says what could not be read, if anything.
	Err string `json:"err,omitempty"`
}

// Run loads cfg.Locker for cfg.Total in back-to-back intervals, with the
// baseline interleaved, and returns every point in order. It stops early,
// returning the points so far and ctx's error, when ctx ends.
func Run(ctx context.Context, cfg Config) ([]Point, error) {
	if cfg.Locker == nil || cfg.Scenario.Duration <= 0 || cfg.Total < cfg.Scenario.Duration {
		return nil, errors.New("soak: need a system, an interval and a total of at least one interval")
	}
	var (
		pts    []Point
		loaded time.Duration
		start  = time.Now()
	)
	add := func(p Point) {
		pts = append(pts, p)
		if cfg.OnPoint != nil {
			cfg.OnPoint(p)
		}
	}
	baseline := func() error {
		if cfg.Baseline == nil || cfg.BaselineDuration <= 0 {
			return nil
		}
		sc := cfg.Scenario
		sc.Duration, sc.Warmup = cfg.BaselineDuration, time.Second
		p, err := interval(ctx, cfg.Baseline, cfg.BaselineMeter, nil, sc, start)
		if err != nil {
			return fmt.Errorf("soak: baseline %s: %w", cfg.Baseline.Name(), err)
		}
		p.Baseline = true
		add(p)
		return nil
	}
	if err := baseline(); err != nil {
		return pts, err
	}
	for i := 0; loaded+cfg.Scenario.Duration <= cfg.Total; i++ {
		sc := cfg.Scenario
		if i > 0 {
			sc.Warmup = 0
		}
		p, err := interval(ctx, cfg.Locker, cfg.Meter, cfg.Probe, sc, start)
		if err != nil {
			return pts, fmt.Errorf("soak: interval %d: %w", i+1, err)
		}
		loaded += sc.Duration
		add(p)
		if cfg.BaselineEvery > 0 && (i+1)%cfg.BaselineEvery == 0 {
			if err := baseline(); err != nil {
				return pts, err
			}
		}
	}
	return pts, nil
}

// interval runs one measured window of lk and makes it a point.
func interval(ctx context.Context, lk load.Locker, meter load.CPUMeter, probe Probe, sc load.Scenario, start time.Time) (Point, error) {
	r, err := load.RunMeasured(ctx, lk, sc, nil, meter)
	if err != nil {
		return Point{}, err
	}
	p := Point{System: lk.Name(), At: time.Since(start), Window: r.Window, OpsPerSec: r.OpsPerSec()}
	for _, n := range r.Errors {
		p.Errors += n
	}
	if l := load.Summarize(r.Acquire); l != nil {
		p.P99Ms, p.P999Ms = l.P99Ms, l.P999Ms
	}
	if c := r.CPU; c != nil && c.ServerNote == "" && r.Ops > 0 && c.ServerProcs > 0 {
		p.ServerCPUPerOpUs = c.ServerSeconds / float64(r.Ops) * 1e6
	}
	if probe != nil {
		st, err := probe.Sample(ctx)
		if err != nil {
			st.Err = err.Error()
		}
		p.Nodes = &st
	}
	return p, nil
}
