package load_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/memlock"
)

func scenario(kind load.Kind, workers int) load.Scenario {
	sc := load.Scenario{
		Name: string(kind), Kind: kind, Workers: workers,
		Warmup: 50 * time.Millisecond, Duration: 250 * time.Millisecond,
		TTL: 5 * time.Second, AcquireTimeout: 2 * time.Second, Seed: 1,
	}
	switch kind {
	case load.Contended:
		sc.Keys = 2
	case load.RenewHeavy:
		sc.Renews = 3
	case load.ReadWrite:
		sc.Keys, sc.ReadFraction = 2, 0.8
	}
	return sc
}

func TestRunEveryKindOnTheFake(t *testing.T) {
	for _, kind := range load.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			lk := memlock.New(memlock.Options{Latency: 50 * time.Microsecond})
			sc := scenario(kind, 8)
			if kind == load.Contended || kind == load.ReadWrite {
				sc.Hold = 200 * time.Microsecond
			}
			res, err := load.Run(context.Background(), lk, sc, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Ops == 0 {
				t.Log("no op completed in the window (a starved machine); checking the rest")
			}
			if len(res.Errors) != 0 {
				t.Errorf("errors: %v (%v)", res.Errors, res.ErrorSamples)
			}
			if res.Overlaps != 0 || res.TokenRegressions != 0 {
				t.Errorf("a correct lock showed %d overlaps, %d token regressions", res.Overlaps, res.TokenRegressions)
			}
			if got := res.Acquire.TotalCount(); got != res.Ops {
				t.Errorf("acquire samples %d, ops %d", got, res.Ops)
			}
			if got := res.Release.TotalCount(); got != res.Ops {
				t.Errorf("release samples %d, ops %d", got, res.Ops)
			}
			if kind == load.RenewHeavy {
				if got, want := res.Renew.TotalCount(), res.Ops*int64(sc.Renews); got != want {
					t.Errorf("renew samples %d, want %d", got, want)
				}
			} else if res.Renew != nil {
				t.Errorf("renew histogram in a %s run", kind)
			}
			var sum int64
			for _, n := range res.PerWorker {
				sum += n
			}
			if sum != res.Ops || len(res.PerWorker) != sc.Workers {
				t.Errorf("per-worker counts %v do not add up to %d", res.PerWorker, res.Ops)
			}
			if n := lk.Held(); n != 0 {
				t.Errorf("%d keys still held or waited for after the run", n)
			}
		})
	}
}

// The warm-up must not be counted: with every call taking at least 2ms, one
// worker cannot complete more than window/4ms ops inside the window, however
// long the warm-up was.
func TestWarmupNotCounted(t *testing.T) {
	lk := memlock.New(memlock.Options{Latency: 2 * time.Millisecond})
	sc := scenario(load.Uncontended, 1)
	sc.Warmup, sc.Duration = 400*time.Millisecond, 200*time.Millisecond
	res, err := load.Run(context.Background(), lk, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(sc.Duration/(4*time.Millisecond)) + 1; res.Ops > limit {
		t.Fatalf("counted %d ops; the window allows at most %d", res.Ops, limit)
	}
	if res.Window != sc.Duration {
		t.Errorf("window %v, want %v", res.Window, sc.Duration)
	}
}

func TestGuardCatchesBrokenLock(t *testing.T) {
	lk := memlock.New(memlock.Options{Broken: true})
	sc := scenario(load.Contended, 8)
	sc.Keys, sc.Hold = 1, time.Millisecond
	res, err := load.Run(context.Background(), lk, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Overlaps == 0 {
		t.Fatal("a lock without mutual exclusion showed no overlaps")
	}
}

func TestGuard(t *testing.T) {
	g := load.NewGuard(2)
	if g.Enter(0, load.Exclusive, 1) {
		t.Fatal("first holder overlaps")
	}
	if !g.Enter(0, load.Exclusive, 2) {
		t.Fatal("second exclusive holder not seen")
	}
	g.Exit(0, load.Exclusive)
	g.Exit(0, load.Exclusive)
	if g.Enter(0, load.Exclusive, 2) {
		t.Fatal("holder after release overlaps")
	}
	g.Exit(0, load.Exclusive)
	// Readers share; a writer among readers overlaps.
	if g.Enter(1, load.Read, 5) || g.Enter(1, load.Read, 4) {
		t.Fatal("readers overlap each other")
	}
	if !g.Enter(1, load.Write, 9) {
		t.Fatal("writer among readers not seen")
	}
	if g.Overlaps() != 2 {
		t.Fatalf("overlaps %d, want 2", g.Overlaps())
	}
	// Key 0: tokens 1, 2, 2 — the repeated 2 is a regression. Key 1: readers
	// 5 and 4 (readers may enter in any order), then writer 9: fine.
	if g.TokenRegressions() != 1 {
		t.Fatalf("token regressions %d, want 1", g.TokenRegressions())
	}
}

func TestUnsupportedScenario(t *testing.T) {
	lk := memlock.New(memlock.Options{NoReadWrite: true, NoRenew: true})
	for _, kind := range []load.Kind{load.ReadWrite, load.RenewHeavy} {
		_, err := load.Run(context.Background(), lk, scenario(kind, 1), nil)
		if !errors.Is(err, load.ErrUnsupported) {
			t.Errorf("%s on a system without it: err %v, want ErrUnsupported", kind, err)
		}
	}
}

func TestValidate(t *testing.T) {
	sc := scenario(load.Contended, 4)
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := sc
	bad.Workers, bad.Keys, bad.Hold = 0, 0, 10*time.Second
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error for zero workers, zero keys and hold > ttl")
	}
}

func TestAcquireTimeoutsAreCounted(t *testing.T) {
	lk := memlock.New(memlock.Options{})
	// Someone outside the run holds the one hot key... but the run picks its
	// own key names, so instead use a hold longer than the acquire timeout.
	sc := scenario(load.Contended, 4)
	sc.Keys, sc.Hold, sc.AcquireTimeout = 1, 150*time.Millisecond, 20*time.Millisecond
	sc.Warmup, sc.Duration = 0, 400*time.Millisecond
	res, err := load.Run(context.Background(), lk, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors["acquire: timeout"] == 0 {
		t.Fatalf("no acquire timeouts counted: %v", res.Errors)
	}
}

type netErr struct{ timeout bool }

func (e netErr) Error() string   { return "net" }
func (e netErr) Timeout() bool   { return e.timeout }
func (e netErr) Temporary() bool { return false }

var _ net.Error = netErr{}

func TestClassify(t *testing.T) {
	cases := map[string]error{
		"timeout":     fmt.Errorf("x: %w", context.DeadlineExceeded),
		"not held":    fmt.Errorf("x: %w", load.ErrNotHeld),
		"unavailable": fmt.Errorf("x: %w", load.ErrUnavailable),
		"unsupported": load.ErrUnsupported,
		"canceled":    context.Canceled,
		"network":     &net.OpError{Op: "dial", Err: netErr{}},
		"other":       errors.New("boom"),
	}
	for want, err := range cases {
		if got := load.Classify(err); got != want {
			t.Errorf("Classify(%v) = %q, want %q", err, got, want)
		}
	}
	if got := load.Classify(netErr{timeout: true}); got != "timeout" {
		t.Errorf("network timeout classified %q", got)
	}
}

func TestSuiteInterleavesAndMarksNA(t *testing.T) {
	a := memlock.New(memlock.Options{Name: "a"})
	b := memlock.New(memlock.Options{Name: "b", NoReadWrite: true})
	short := func(sc load.Scenario) load.Scenario {
		sc.Warmup, sc.Duration = 10*time.Millisecond, 60*time.Millisecond
		return sc
	}
	s := &load.Suite{
		Lockers:   []load.Locker{a, b},
		Scenarios: []load.Scenario{short(scenario(load.Uncontended, 2)), short(scenario(load.ReadWrite, 2))},
		Repeats:   2,
		Sweep: []load.Scenario{
			func() load.Scenario { sc := short(scenario(load.Uncontended, 1)); sc.Name = "sweep"; return sc }(),
			func() load.Scenario { sc := short(scenario(load.Uncontended, 3)); sc.Name = "sweep"; return sc }(),
		},
		SweepRepeats: 1,
		Log:          slog.New(slog.DiscardHandler),
	}
	rs, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%s/%d/%s/%v/%d", r.Scenario.Name, r.Scenario.Workers, r.System, r.Supported, r.OpsPerSec.N))
	}
	want := []string{
		"uncontended/2/a/true/2", "uncontended/2/b/true/2",
		"rw/2/a/true/2", "rw/2/b/false/0",
		"sweep/1/a/true/1", "sweep/1/b/true/1",
		"sweep/3/a/true/1", "sweep/3/b/true/1",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results\n got %v\nwant %v", got, want)
	}
	for _, r := range rs {
		if r.Scenario.Name == "rw" && r.System == "a" && r.Fairness == nil {
			t.Error("rw result without fairness")
		}
	}
}

func TestSuiteStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sc := scenario(load.Uncontended, 2)
	sc.Duration = time.Hour
	s := &load.Suite{Lockers: []load.Locker{memlock.New(memlock.Options{})}, Scenarios: []load.Scenario{sc}, Repeats: 1,
		Log: slog.New(slog.DiscardHandler)}
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() { _, err := s.Run(ctx); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("suite did not stop after cancel")
	}
}
