package group

import (
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/paxlock/paxlock/client/wire"
)

// stageLog records a traced request's stages.
type stageLog struct {
	mu     sync.Mutex
	stages []Stage
	status []wire.Status
	by     []*Trace
}

func (l *stageLog) trace() *Trace {
	return &Trace{Mark: func(s Stage, st wire.Status, by *Trace) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.stages, l.status, l.by = append(l.stages, s), append(l.status, st), append(l.by, by)
	}}
}

// index is the position of the last stage s with status st, or -1.
func (l *stageLog) index(s Stage, st wire.Status) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.stages) - 1; i >= 0; i-- {
		if l.stages[i] == s && l.status[i] == st {
			return i
		}
	}
	return -1
}

// TestTraceStagesOfBlockingAcquire checks the stages a traced waiter
// and the traced release that wakes it go through, in order: the waiter
// queued and answered LOCK_WAIT, then its grant proposed, committed and
// granted, by the release's trace; the release proposed, committed and
// answered.
func TestTraceStagesOfBlockingAcquire(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{})
	a, b := newSink(), newSink()
	r := c.do(a, Request{Op: OpAcquire, Key: "traced", Owner: owner(1, 1), TTL: 10 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	var wl, rl stageLog
	wt, rt := wl.trace(), rl.trace()
	if w := c.do(b, Request{Op: OpAcquire, Key: "traced", Owner: owner(2, 1), MaxWait: -1, WaitID: 5, Trace: wt}); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", w)
	}
	if rr := c.do(a, Request{Op: OpRelease, Key: "traced", Owner: owner(1, 1), Token: r.Token, Trace: rt}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if g := b.granted(t, 5); g.Status != wire.StatusSuccess {
		t.Fatalf("granted: %+v", g)
	}
	b.wait(t, "the waiter's grant marked", func() bool { return wl.index(StageGranted, wire.StatusSuccess) >= 0 })
	order := []int{
		wl.index(StageQueued, wire.StatusLockWait),
		wl.index(StageResponded, wire.StatusLockWait),
		wl.index(StageProposed, 0),
		wl.index(StageCommitted, wire.StatusSuccess),
		wl.index(StageGranted, wire.StatusSuccess),
	}
	if slices.Contains(order, -1) || !slices.IsSorted(order) {
		t.Fatalf("waiter's stages %v (positions %v)", wl.stages, order)
	}
	wl.mu.Lock()
	by := wl.by[order[4]]
	wl.mu.Unlock()
	if by != rt {
		t.Fatalf("the grant names %p as its waker, want the release's trace %p", by, rt)
	}
	order = []int{rl.index(StageProposed, 0), rl.index(StageCommitted, wire.StatusSuccess), rl.index(StageResponded, wire.StatusSuccess)}
	if slices.Contains(order, -1) || !slices.IsSorted(order) {
		t.Fatalf("release's stages %v (positions %v)", rl.stages, order)
	}
}

// TestTraceKeepsRequestSizeClass checks that the Trace pointer keeps
// Request within its 192-byte allocation size class.
func TestTraceKeepsRequestSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Request{}); n > 192 {
		t.Fatalf("Request is %d bytes, over the 192-byte size class", n)
	}
}
