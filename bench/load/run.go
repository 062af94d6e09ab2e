package load

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Timeouts outside the measured work.
const (
	sessionTimeout = 60 * time.Second // making or closing all sessions
	releaseTimeout = 10 * time.Second // one release, even after the run stopped
	stopGrace      = 30 * time.Second // workers must stop this long after the end
	errorPause     = 5 * time.Millisecond
	sessionWorkers = 8 // sessions made concurrently
)

// RunResult is the raw outcome of one run: one system, one scenario, one
// repeat. Only ops whose release completed inside the measured window count.
type RunResult struct {
	Scenario Scenario
	System   string
	Repeat   int
	// Window is the measured time.
	Window time.Duration
	// Ops is the number of complete ops (acquire + renews + release).
	Ops int64
	// Acquire, Release and Renew latencies (Acquire includes any wait).
	Acquire, Release, Renew *hdrhistogram.Histogram
	// Errors by "phase: kind", and the first message seen for each.
	Errors       map[string]int64
	ErrorSamples map[string]string
	// Overlaps and TokenRegressions seen by the guard (hot keys only), at
	// any time of the run: a violation in the warm-up counts too.
	Overlaps, TokenRegressions int64
	// PerWorker is each worker's number of complete ops.
	PerWorker []int64
	// CPU is what the measured window cost in CPU, if a CPUMeter was given.
	CPU *RunCPU
}

// OpsPerSec is the run's throughput.
func (r *RunResult) OpsPerSec() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Window.Seconds()
}

// Live exposes a running run's counters to a progress display.
type Live struct {
	ops    atomic.Int64
	errs   atomic.Int64
	phases atomic.Pointer[phases]
}

type phases struct {
	start, measureFrom, measureTo time.Time
}

// Snapshot returns the counts so far, the time into the run, and whether
// the measured window has begun.
func (l *Live) Snapshot() (ops, errs int64, elapsed, warmup, total time.Duration, measuring bool) {
	p := l.phases.Load()
	if p == nil {
		return 0, 0, 0, 0, 0, false
	}
	now := time.Now()
	return l.ops.Load(), l.errs.Load(), now.Sub(p.start), p.measureFrom.Sub(p.start),
		p.measureTo.Sub(p.start), !now.Before(p.measureFrom)
}

// Run drives lk with sc: it opens one session per worker, runs the warm-up
// and the measured window, stops the workers, closes the sessions and
// returns what it measured. live may be nil.
func Run(ctx context.Context, lk Locker, sc Scenario, live *Live) (*RunResult, error) {
	return RunMeasured(ctx, lk, sc, live, nil)
}

// RunMeasured is Run that also reads meter at the start and at the end of
// the measured window and reports the CPU time spent in between (meter nil:
// no CPU figures).
func RunMeasured(ctx context.Context, lk Locker, sc Scenario, live *Live, meter CPUMeter) (*RunResult, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if ok, why := sc.Supported(lk.Caps()); !ok {
		return nil, fmt.Errorf("%s cannot run %s: %s: %w", lk.Name(), sc.Name, why, ErrUnsupported)
	}
	if live == nil {
		live = &Live{}
	}
	sessions, err := openSessions(ctx, lk, sc.Workers)
	if err != nil {
		return nil, err
	}
	defer closeSessions(sessions)

	r := newRun(sc, live)

	start := time.Now()
	r.from = start.Add(sc.Warmup)
	r.to = r.from.Add(sc.Duration)
	live.phases.Store(&phases{start: start, measureFrom: r.from, measureTo: r.to})
	stopCtx, stop := context.WithDeadline(ctx, r.to)
	defer stop()

	// The CPU readings at the window's edges, taken by a goroutine of their
	// own so that no worker waits for them.
	var cpuAt [2]CPUSample
	cpuDone := make(chan struct{})
	if meter != nil {
		go func() {
			defer close(cpuDone)
			for i, at := range []time.Time{r.from, r.to} {
				pause(stopCtx, time.Until(at))
				if i == 0 && stopCtx.Err() != nil {
					return // cancelled before the window began
				}
				cpuAt[i] = meter.ReadCPU()
			}
		}()
	} else {
		close(cpuDone)
	}

	var wg sync.WaitGroup
	for w := range sc.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(stopCtx, w, sessions[w])
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(r.to) + sc.AcquireTimeout + stopGrace):
		return nil, fmt.Errorf("%s: workers did not stop within %v of the end of the run", lk.Name(), sc.AcquireTimeout+stopGrace)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	<-cpuDone // stopCtx has ended (the workers stopped at r.to), so this is quick

	return r.result(lk.Name(), meter, cpuAt), nil
}

// newRun is the workers' state for a run of sc: its key prefix, its
// histograms and, for a scenario on hot keys, the keys and their guard.
func newRun(sc Scenario, live *Live) *run {
	r := &run{
		sc:       sc,
		live:     live,
		prefix:   "pxb/" + sc.Name + "/" + runID(),
		acq:      newStripedHist(min(sc.Workers, 16)),
		rel:      newStripedHist(min(sc.Workers, 16)),
		errs:     map[string]int64{},
		samples:  map[string]string{},
		perWork:  make([]int64, sc.Workers),
		renewing: sc.Kind == RenewHeavy,
	}
	if r.renewing {
		r.ren = newStripedHist(min(sc.Workers, 16))
	}
	if sc.Hot() {
		r.guard = NewGuard(sc.Keys)
		r.hotKeys = make([]string, sc.Keys)
		for i := range r.hotKeys {
			r.hotKeys[i] = r.prefix + "/hot/" + strconv.Itoa(i)
		}
	}
	return r
}

// result is what the run measured on system; cpuAt holds meter's readings
// at the window's edges (meter nil: no CPU figures).
func (r *run) result(system string, meter CPUMeter, cpuAt [2]CPUSample) *RunResult {
	sc := r.sc
	res := &RunResult{
		Scenario:     sc,
		System:       system,
		Window:       sc.Duration,
		Acquire:      r.acq.merged(),
		Release:      r.rel.merged(),
		Errors:       r.errs,
		ErrorSamples: r.samples,
		PerWorker:    r.perWork,
	}
	if r.ren != nil {
		res.Renew = r.ren.merged()
	}
	if meter != nil && !cpuAt[1].At.IsZero() {
		res.CPU = CPUBetween(cpuAt[0], cpuAt[1])
	}
	for _, n := range r.perWork {
		res.Ops += n
	}
	if r.guard != nil {
		res.Overlaps = r.guard.Overlaps()
		res.TokenRegressions = r.guard.TokenRegressions()
	}
	return res
}

// run is the shared state of one Run's workers.
type run struct {
	sc       Scenario
	live     *Live
	prefix   string
	hotKeys  []string
	guard    *Guard
	from, to time.Time
	renewing bool

	acq, rel, ren *stripedHist

	mu      sync.Mutex
	errs    map[string]int64
	samples map[string]string
	perWork []int64 // each worker writes only its own element
}

func (r *run) inWindow(t time.Time) bool { return !t.Before(r.from) && t.Before(r.to) }

// worker runs ops until ctx is done.
func (r *run) worker(ctx context.Context, w int, s Session) {
	sc := r.sc
	rng := mrand.New(mrand.NewPCG(sc.Seed, uint64(w)))
	keyBuf := make([]byte, 0, len(r.prefix)+40)
	var renewDurs []time.Duration
	for ctx.Err() == nil {
		req := Request{TTL: sc.TTL}
		hot := -1
		switch sc.Kind {
		case Uncontended, RenewHeavy:
			keyBuf = append(keyBuf[:0], r.prefix...)
			keyBuf = append(keyBuf, "/f/"...)
			keyBuf = strconv.AppendInt(keyBuf, int64(w), 10)
			keyBuf = append(keyBuf, '-')
			keyBuf = strconv.AppendUint(keyBuf, rng.Uint64(), 16)
			req.Key, req.Fresh = string(keyBuf), true
		case Contended:
			hot = rng.IntN(len(r.hotKeys))
			req.Key = r.hotKeys[hot]
		case ReadWrite:
			hot = rng.IntN(len(r.hotKeys))
			req.Key, req.Mode = r.hotKeys[hot], Write
			if rng.Float64() < sc.ReadFraction {
				req.Mode = Read
			}
		}

		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, sc.AcquireTimeout)
		lease, err := s.Acquire(actx, req)
		cancel()
		t1 := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return // the run ended while waiting: not an error
			}
			r.fail(t1, "acquire", err)
			if t1.Sub(t0) < errorPause {
				pause(ctx, errorPause)
			}
			continue
		}
		if hot >= 0 {
			r.guard.Enter(hot, req.Mode, lease.Token)
		}
		if sc.Hold > 0 {
			pause(ctx, sc.Hold)
		}
		renewDurs = renewDurs[:0]
		renewFailed := false
		if r.renewing {
			for range sc.Renews {
				tr := time.Now()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sc.AcquireTimeout)
				err := s.Renew(rctx, lease, sc.TTL)
				cancel()
				if err != nil {
					r.fail(time.Now(), "renew", err)
					renewFailed = true
					break
				}
				renewDurs = append(renewDurs, time.Since(tr))
			}
		}
		if hot >= 0 {
			r.guard.Exit(hot, req.Mode)
		}
		t2 := time.Now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err = s.Release(rctx, lease)
		cancel()
		t3 := time.Now()
		if err != nil {
			r.fail(t3, "release", err)
			continue
		}
		if renewFailed || !r.inWindow(t3) {
			continue
		}
		r.acq.record(w, t1.Sub(t0))
		r.rel.record(w, t3.Sub(t2))
		for _, d := range renewDurs {
			r.ren.record(w, d)
		}
		r.perWork[w]++
		r.live.ops.Add(1)
	}
}

// fail counts err under "phase: kind" if it happened in the window.
func (r *run) fail(t time.Time, phase string, err error) {
	if !r.inWindow(t) {
		return
	}
	key := phase + ": " + Classify(err)
	r.live.errs.Add(1)
	r.mu.Lock()
	r.errs[key]++
	if _, ok := r.samples[key]; !ok {
		r.samples[key] = err.Error()
	}
	r.mu.Unlock()
}

// Classify names the kind of an error for the error counts: "timeout",
// "not held", "unavailable", "unsupported", "canceled", "network" or "other".
func Classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrNotHeld):
		return "not held"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne):
		if ne.Timeout() {
			return "timeout"
		}
		return "network"
	}
	return "other"
}

// pause sleeps for d or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// runID is a random name part that keeps one run's keys apart from every
// other run's, so leftovers of a run never meet the next.
func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RandomSeed returns a seed for Scenario.Seed.
func RandomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func openSessions(ctx context.Context, lk Locker, n int) ([]Session, error) {
	ctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	sessions := make([]Session, n)
	errs := make([]error, n)
	sem := make(chan struct{}, sessionWorkers)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sessions[i], errs[i] = lk.NewSession(ctx, i)
		}()
	}
	wg.Wait()
	var first error
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		closeSessions(sessions)
		return nil, fmt.Errorf("%s: %d of %d sessions failed to open, the first with: %w", lk.Name(), failed, n, first)
	}
	return sessions, nil
}

func closeSessions(sessions []Session) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	sem := make(chan struct{}, sessionWorkers)
	var wg sync.WaitGroup
	for _, s := range sessions {
		if s == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_ = s.Close(ctx)
		}()
	}
	wg.Wait()
}
