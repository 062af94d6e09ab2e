package load

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in nanoseconds from 1 ns to one hour with three
// significant digits (0.1% relative error), the usual HdrHistogram setting.
const (
	histLowest  = 1
	histHighest = int64(time.Hour)
	histSigFigs = 3
)

// newHist returns an empty latency histogram.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowest, histHighest, histSigFigs)
}

// recordDur records d, clamped into the histogram's range.
func recordDur(h *hdrhistogram.Histogram, d time.Duration) {
	v := int64(d)
	if v < histLowest {
		v = histLowest
	}
	if v > histHighest {
		v = histHighest
	}
	_ = h.RecordValue(v) // cannot fail inside the range
}

// stripedHist lets many workers record into one logical histogram without
// one lock for all and without one (large) histogram per worker.
type stripedHist struct {
	stripes []histStripe
}

type histStripe struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
	_  [40]byte // keep stripes' mutexes on separate cache lines
}

func newStripedHist(n int) *stripedHist {
	if n < 1 {
		n = 1
	}
	s := &stripedHist{stripes: make([]histStripe, n)}
	for i := range s.stripes {
		s.stripes[i].h = newHist()
	}
	return s
}

// record records d in the stripe of worker w.
func (s *stripedHist) record(w int, d time.Duration) {
	st := &s.stripes[w%len(s.stripes)]
	st.mu.Lock()
	recordDur(st.h, d)
	st.mu.Unlock()
}

// merged returns one histogram holding every stripe's values.
func (s *stripedHist) merged() *hdrhistogram.Histogram {
	out := newHist()
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		out.Merge(st.h)
		st.mu.Unlock()
	}
	return out
}

// Latency summarizes one latency histogram, in milliseconds.
type Latency struct {
	Count  int64   `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	// CDF is the cumulative distribution: for each point, the fraction of
	// samples at or below the latency. Enough points for a plot.
	CDF []CDFPoint `json:"cdf,omitempty"`
}

// CDFPoint is one point of a latency CDF.
type CDFPoint struct {
	Ms   float64 `json:"ms"`
	Frac float64 `json:"frac"`
}

// cdfPercentiles are the percentiles at which the CDF is sampled: every
// percent, then finer towards the tail.
var cdfPercentiles = func() []float64 {
	var ps []float64
	for p := 0.0; p < 99; p++ {
		ps = append(ps, p)
	}
	ps = append(ps, 99, 99.2, 99.4, 99.6, 99.8, 99.9, 99.95, 99.99, 99.999, 100)
	return ps
}()

func nsToMs(v float64) float64 { return v / 1e6 }

// Summarize turns a histogram into a Latency; nil for an empty histogram.
func Summarize(h *hdrhistogram.Histogram) *Latency {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	l := &Latency{
		Count:  h.TotalCount(),
		MeanMs: nsToMs(h.Mean()),
		P50Ms:  nsToMs(float64(h.ValueAtQuantile(50))),
		P90Ms:  nsToMs(float64(h.ValueAtQuantile(90))),
		P99Ms:  nsToMs(float64(h.ValueAtQuantile(99))),
		P999Ms: nsToMs(float64(h.ValueAtQuantile(99.9))),
		MaxMs:  nsToMs(float64(h.Max())),
	}
	vals := h.ValueAtPercentilesSlice(cdfPercentiles)
	for i, v := range vals {
		pt := CDFPoint{Ms: nsToMs(float64(v)), Frac: cdfPercentiles[i] / 100}
		if n := len(l.CDF); n > 0 && l.CDF[n-1].Ms == pt.Ms {
			l.CDF[n-1].Frac = pt.Frac // same value: keep the larger fraction
			continue
		}
		l.CDF = append(l.CDF, pt)
	}
	return l
}
