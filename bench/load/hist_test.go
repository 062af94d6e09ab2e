package load

import (
	"math"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	h := newHist()
	for i := 1; i <= 1000; i++ {
		recordDur(h, time.Duration(i)*time.Millisecond/10) // 0.1ms .. 100ms
	}
	l := Summarize(h)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.002+1e-9 {
			t.Errorf("%s = %v, want ~%v", name, got, want)
		}
	}
	near("p50", l.P50Ms, 50)
	near("p90", l.P90Ms, 90)
	near("p99", l.P99Ms, 99)
	near("p99.9", l.P999Ms, 99.9)
	near("max", l.MaxMs, 100)
	near("mean", l.MeanMs, 50.05)
	if l.Count != 1000 {
		t.Errorf("count %d", l.Count)
	}
	last := CDFPoint{Ms: -1, Frac: -1}
	for _, p := range l.CDF {
		if p.Ms <= last.Ms || p.Frac < last.Frac {
			t.Fatalf("CDF not increasing at %+v after %+v", p, last)
		}
		last = p
	}
	if last.Frac != 1 {
		t.Errorf("CDF ends at %v, want 1", last.Frac)
	}
	if Summarize(newHist()) != nil {
		t.Error("empty histogram summarized")
	}
}

func TestRecordClamps(t *testing.T) {
	h := newHist()
	recordDur(h, -time.Second)
	recordDur(h, 2*time.Hour)
	if h.TotalCount() != 2 {
		t.Fatalf("out-of-range values dropped: %d recorded", h.TotalCount())
	}
}

func TestStripedHistMerges(t *testing.T) {
	s := newStripedHist(4)
	for w := range 10 {
		s.record(w, time.Millisecond)
	}
	if n := s.merged().TotalCount(); n != 10 {
		t.Fatalf("merged %d values, want 10", n)
	}
}

func TestSpreadAndJain(t *testing.T) {
	s := SpreadOf([]float64{3, 1, 2, 10})
	if s.Min != 1 || s.Max != 10 || s.Median != 2.5 || s.N != 4 {
		t.Fatalf("spread %+v", s)
	}
	if j := jain([]float64{5, 5, 5, 5}); math.Abs(j-1) > 1e-12 {
		t.Errorf("even shares: Jain %v, want 1", j)
	}
	if j := jain([]float64{8, 0, 0, 0}); math.Abs(j-0.25) > 1e-12 {
		t.Errorf("one worker takes all: Jain %v, want 0.25", j)
	}
	if j := jain([]float64{0, 0}); j != 0 {
		t.Errorf("no acquisitions: Jain %v, want 0", j)
	}
}

func TestMergeRepeats(t *testing.T) {
	sc := Scenario{Name: "contended", Kind: Contended, Workers: 2, Keys: 1, Duration: time.Second}
	mk := func(ops int64, per []int64, lat time.Duration) *RunResult {
		r := &RunResult{Scenario: sc, System: "x", Window: time.Second, Ops: ops, PerWorker: per,
			Acquire: newHist(), Release: newHist(), Errors: map[string]int64{"acquire: timeout": 1},
			ErrorSamples: map[string]string{"acquire: timeout": "deadline"}}
		for range ops {
			recordDur(r.Acquire, lat)
			recordDur(r.Release, lat)
		}
		return r
	}
	res := Merge([]*RunResult{mk(100, []int64{60, 40}, time.Millisecond), mk(300, []int64{150, 150}, 2*time.Millisecond), mk(200, []int64{100, 100}, time.Millisecond)})
	if res.OpsPerSec != (Spread{Min: 100, Median: 200, Max: 300, N: 3}) {
		t.Errorf("ops/s spread %+v", res.OpsPerSec)
	}
	if res.Acquire.Count != 600 {
		t.Errorf("acquire samples %d, want 600", res.Acquire.Count)
	}
	if res.Errors["acquire: timeout"] != 3 || res.ErrorCount() != 3 {
		t.Errorf("errors %v", res.Errors)
	}
	f := res.Fairness
	// per-worker means over the repeats: worker 0 = 310/3, worker 1 = 290/3
	if f == nil || math.Abs(f.MinPerWorker-290.0/3) > 1e-9 || math.Abs(f.MaxPerWorker-310.0/3) > 1e-9 {
		t.Errorf("fairness %+v", f)
	}
	if len(res.Repeats) != 3 {
		t.Errorf("%d repeats kept", len(res.Repeats))
	}
}
