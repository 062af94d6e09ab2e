package load

import (
	"slices"
	"sort"
)

// Spread is the minimum, median and maximum of a value over N repeats.
type Spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// SpreadOf summarizes vs.
func SpreadOf(vs []float64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	return Spread{Min: s[0], Median: median(s), Max: s[len(s)-1], N: len(s)}
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Repeat is what one repeat of a run measured, kept to show the noise.
type Repeat struct {
	Ops          int64            `json:"ops"`
	Seconds      float64          `json:"seconds"`
	OpsPerSec    float64          `json:"ops_per_sec"`
	AcquireP99Ms float64          `json:"acquire_p99_ms"`
	Errors       map[string]int64 `json:"errors,omitempty"`
	Overlaps     int64            `json:"overlaps"`
	// CPU is the CPU time of the window (servers and load generator).
	CPU *RunCPU `json:"cpu,omitempty"`
}

// Fairness describes how evenly the workers of a hot-key run got the lock.
type Fairness struct {
	// Acquisitions per worker per run (the mean over the repeats).
	MinPerWorker    float64 `json:"min_per_worker"`
	MedianPerWorker float64 `json:"median_per_worker"`
	MaxPerWorker    float64 `json:"max_per_worker"`
	// Jain's fairness index over the workers' acquisitions: 1 is perfectly
	// even, 1/workers is one worker getting everything.
	Jain float64 `json:"jain_index"`
	// WaitP99Ms and WaitMaxMs are the acquire waits' 99th percentile and max.
	WaitP99Ms float64 `json:"wait_p99_ms"`
	WaitMaxMs float64 `json:"wait_max_ms"`
}

// Result is one system in one scenario over all repeats: the table row.
type Result struct {
	Scenario Scenario `json:"scenario"`
	System   string   `json:"system"`
	// Supported is false when the system has no such feature; Note says why.
	Supported bool   `json:"supported"`
	Note      string `json:"note,omitempty"`
	// OpsPerSec over the repeats.
	OpsPerSec Spread `json:"ops_per_sec"`
	// Latencies from all repeats' histograms merged.
	Acquire *Latency `json:"acquire,omitempty"`
	Release *Latency `json:"release,omitempty"`
	Renew   *Latency `json:"renew,omitempty"`
	// Errors summed over the repeats, by "phase: kind", with a sample message.
	Errors       map[string]int64  `json:"errors,omitempty"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	// Overlaps and TokenRegressions summed over the repeats; both must be 0.
	Overlaps         int64     `json:"overlaps"`
	TokenRegressions int64     `json:"token_regressions"`
	Fairness         *Fairness `json:"fairness,omitempty"`
	// CPU per op over all repeats, when the suite had a CPU meter.
	CPU     *CPU     `json:"cpu,omitempty"`
	Repeats []Repeat `json:"repeats,omitempty"`
}

// ErrorCount is the total of r.Errors.
func (r Result) ErrorCount() int64 {
	var n int64
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// Unsupported returns the Result of a system that cannot run sc.
func Unsupported(sc Scenario, system, why string) Result {
	return Result{Scenario: sc, System: system, Note: "n/a: " + why}
}

// Merge summarizes the repeats of one system in one scenario. runs must be
// non-empty and share scenario and system.
func Merge(runs []*RunResult) Result {
	first := runs[0]
	res := Result{Scenario: first.Scenario, System: first.System, Supported: true}
	acq, rel := newHist(), newHist()
	ren := newHist()
	var rates []float64
	var perWorker []float64
	for _, r := range runs {
		rates = append(rates, r.OpsPerSec())
		acq.Merge(r.Acquire)
		rel.Merge(r.Release)
		if r.Renew != nil {
			ren.Merge(r.Renew)
		}
		for k, v := range r.Errors {
			if res.Errors == nil {
				res.Errors, res.ErrorSamples = map[string]int64{}, map[string]string{}
			}
			res.Errors[k] += v
			if _, ok := res.ErrorSamples[k]; !ok {
				res.ErrorSamples[k] = r.ErrorSamples[k]
			}
		}
		res.Overlaps += r.Overlaps
		res.TokenRegressions += r.TokenRegressions
		if perWorker == nil {
			perWorker = make([]float64, len(r.PerWorker))
		}
		for i, n := range r.PerWorker {
			if i < len(perWorker) {
				perWorker[i] += float64(n) / float64(len(runs))
			}
		}
		var p99 float64
		if r.Acquire.TotalCount() > 0 {
			p99 = nsToMs(float64(r.Acquire.ValueAtQuantile(99)))
		}
		res.Repeats = append(res.Repeats, Repeat{
			Ops: r.Ops, Seconds: r.Window.Seconds(), OpsPerSec: r.OpsPerSec(),
			AcquireP99Ms: p99, Errors: r.Errors, Overlaps: r.Overlaps, CPU: r.CPU,
		})
	}
	res.CPU = mergeCPU(runs)
	res.OpsPerSec = SpreadOf(rates)
	res.Acquire = Summarize(acq)
	res.Release = Summarize(rel)
	res.Renew = Summarize(ren)
	if first.Scenario.Hot() && len(perWorker) > 0 {
		f := &Fairness{Jain: jain(perWorker)}
		s := SpreadOf(perWorker)
		f.MinPerWorker, f.MedianPerWorker, f.MaxPerWorker = s.Min, s.Median, s.Max
		if res.Acquire != nil {
			f.WaitP99Ms, f.WaitMaxMs = res.Acquire.P99Ms, res.Acquire.MaxMs
		}
		res.Fairness = f
	}
	return res
}

// jain is Jain's fairness index (Σx)² / (n·Σx²).
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0 // nobody acquired anything
	}
	return sum * sum / (float64(len(xs)) * sq)
}
