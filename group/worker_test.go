package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/clock"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// workerRig runs one lock group of one worker on one node, over a fake
// consensus (fakeGroup) and the fake clock: no Host, no store, no wall
// clock. Everything runs on the test's goroutine: a request is handled
// when the test submits it, a proposal's outcome when the test chooses or
// fails it, a deadline when the test advances the clock.
type workerRig struct {
	t  testing.TB
	fc *clock.Fake
	fg *fakeGroup
	sm *StateMachine
	kv *memKV
	w  *worker
}

func newWorkerRig(t testing.TB) *workerRig {
	fc := newFakeClock()
	fg := newFakeGroup(1)
	svc, err := NewServiceWith(Config{Groups: 1, Workers: 1, Clock: fc, Logger: testutil.Logger()},
		func(_ ID, sm *StateMachine) (Consensus, error) {
			fg.replicas[0].sm = sm
			return fg.replicas[0], nil
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	lg := svc.Group(0)
	return &workerRig{t: t, fc: fc, fg: fg, sm: lg.sm, kv: fg.replicas[0].kv, w: lg.workers[0]}
}

// apply applies c at instance inst on the group's state machine directly,
// as if chosen before the worker's term.
func (r *workerRig) apply(inst uint64, c command) *outcome {
	res := make([]any, 1)
	r.sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, r.kv, res)
	return res[0].(*outcome)
}

// request submits req (in namespace "ns") to the worker, which handles it
// before request returns.
func (r *workerRig) request(req Request) {
	req.Namespace = "ns"
	req.Hash = wire.KeyHash("ns", req.Key)
	r.w.submit(&req)
}

// master makes the node the group's serving master, or takes that away.
func (r *workerRig) master(serving bool) {
	if serving {
		r.fg.setMaster(1)
	} else {
		r.fg.setMaster(0)
	}
}

// TestStaleResultAnsweredAndIgnored: the outcome of a proposal made
// under a mastership the worker has since lost (and regained) is told to
// its requester, and does not unblock the key's change of the new term,
// which would let two changes of one key be in flight (and share an
// instance, breaking I2).
func TestStaleResultAnsweredAndIgnored(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	key := fullKey("ns", "k")
	s := newSink()
	a := owner(1, 1)
	r.master(true)
	r.request(Request{Op: OpAcquire, Key: "k", Owner: a, ReqID: 1, Sink: s})
	// The acquire is chosen, but its outcome is held back.
	old := r.fg.applyNext()
	if old == nil {
		t.Fatal("the acquire was not proposed")
	}
	// Mastership goes and comes back before the acquire's outcome
	// reaches the worker; the new term releases the lock meanwhile.
	r.master(false)
	r.master(true)
	out := old.res.Value.(*outcome)
	r.request(Request{Op: OpRelease, Key: "k", Owner: a, Token: out.token, ReqID: 2, Sink: s})
	old.answer()
	if resp, ok := s.resps[1]; !ok || resp.Status != wire.StatusSuccess || resp.Token != out.token {
		t.Fatalf("stale requester answered %+v (%v), want SUCCESS with token %d", resp, ok, out.token)
	}
	ks := r.w.keys[key]
	if ks == nil || !ks.busy {
		t.Fatal("a stale result unblocked the key while the new term's change is in flight")
	}
	// An acquire for the key waits for the release in flight.
	r.request(Request{Op: OpAcquire, Key: "k", Owner: owner(3, 1), ReqID: 3, Sink: s})
	if len(ks.deferred) != 1 || r.fg.pending() != 1 {
		t.Fatalf("a request was handled while another change of its key was in flight (%d deferred, %d proposals)", len(ks.deferred), r.fg.pending())
	}
	r.fg.chooseNext() // the release; then the deferred acquire is proposed
	if resp := s.resps[2]; resp.Status != wire.StatusSuccess {
		t.Fatalf("release answered %+v", resp)
	}
	if _, ok := s.resps[3]; ok || r.fg.pending() != 1 {
		t.Fatalf("the deferred acquire was not proposed after the release (answered %v, %d proposals)", ok, r.fg.pending())
	}
	r.fg.chooseNext()
	if resp := s.resps[3]; resp.Status != wire.StatusSuccess || resp.Token <= out.token {
		t.Fatalf("acquire after the release answered %+v (old token %d)", resp, out.token)
	}
}

// TestFailedExpireIsRetried: an Expire that could not be proposed (here
// every proposal fails at once with ErrNotMaster; in life an overloaded
// queue or a lost lease) is proposed again, rather than leaving the lock
// held for good.
func TestFailedExpireIsRetried(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	key := fullKey("ns", "k")
	a := owner(1, 1)
	if o := r.apply(3, command{op: opAcquire, key: key, owner: a, ttlMs: 1000}); o.status != wire.StatusSuccess {
		t.Fatal(o.status)
	}
	r.master(true)
	r.fg.reject = paxos.ErrNotMaster
	deadline := func() (time.Time, bool) {
		ns, ok := r.w.deadline(key, a, 3)
		return r.w.timeOf(ns), ok && ns != 0
	}
	if d, _ := deadline(); !d.Equal(r.fc.Now().Add(time.Second)) {
		t.Fatalf("deadline %v after take-over, want now+1s", d)
	}
	for i := range 3 {
		// The deadline passes: the timer fires, the Expire is proposed and
		// fails.
		d, _ := deadline()
		r.fc.Advance(d.Sub(r.fc.Now()))
		if r.fg.submitted != i+1 {
			t.Fatalf("round %d: %d Expires proposed in all, want %d", i, r.fg.submitted, i+1)
		}
		if ks := r.w.keys[key]; ks != nil && ks.busy {
			t.Fatalf("round %d: key state %+v", i, ks)
		}
		d, ok := deadline()
		if !ok || !d.After(r.fc.Now()) {
			t.Fatalf("round %d: after a failed Expire the hold has no future deadline (%v, %v)", i, d, ok)
		}
	}
}

// TestReleasedHoldsLeaveTheExpiryHeap: a released hold's deadline leaves
// the heap at once, the slots of many released holds are given back, and
// the heap still yields the live deadlines in order.
func TestReleasedHoldsLeaveTheExpiryHeap(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	r.master(true)
	const n, released = 8192, 7000
	now := r.fc.Now()
	for i := range n {
		key := fullKey("ns", fmt.Sprint("k", i))
		o := r.apply(uint64(i+1), command{op: opAcquire, key: key, owner: owner(1, uint64(i)), ttlMs: 1000})
		if o.status != wire.StatusSuccess {
			t.Fatal(o.status)
		}
		r.w.armDeadline(key, o.token, owner(1, uint64(i)), nil, now.Add(time.Duration(i*7919%n)*time.Millisecond))
	}
	for i := range released {
		key := fullKey("ns", fmt.Sprint("k", i))
		if o := r.apply(uint64(n+i+1), command{op: opRelease, key: key, owner: owner(1, uint64(i)), token: uint64(i + 1)}); o.status != wire.StatusSuccess {
			t.Fatal(o.status)
		}
		r.w.dropDeadline(key, owner(1, uint64(i)), uint64(i+1))
	}
	tt := &r.w.times
	if got, want := len(tt.heap), n-released; got != want || tt.live != want || len(tt.byKey) != want {
		t.Fatalf("%d heap entries, %d slots, %d keys left, want %d", len(tt.heap), tt.live, len(tt.byKey), want)
	}
	if len(tt.slots) > 4*(n-released) {
		t.Fatalf("%d slots kept for %d holds", len(tt.slots), n-released)
	}
	var last int64
	for tt.next() >= 0 {
		e := tt.pop()
		if e.at < last {
			t.Fatalf("deadline %d after %d", e.at, last)
		}
		last = e.at
		if dl, ok := r.w.deadline(e.key, e.owner, e.token); !ok || dl != e.at {
			t.Fatalf("popped %+v, its hold's deadline is %d (%v)", e, dl, ok)
		}
	}
}

// TestInDoubtProposalAnsweredTimeout: a release whose replica stopped
// with it in flight (paxos.ErrOutcomeUnknown: another master may still
// choose it) is answered TIMEOUT, which tells the client the outcome is
// unknown; one that was never proposed (ErrStopped alone) is answered
// NO_MASTER, which tells it nothing changed.
func TestInDoubtProposalAnsweredTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want wire.Status
	}{
		{fmt.Errorf("%w: %w", paxos.ErrOutcomeUnknown, paxos.ErrStopped), wire.StatusTimeout},
		{paxos.ErrStopped, wire.StatusNoMaster},
		{paxos.ErrNotChosen, wire.StatusNoMaster},
	} {
		r := newWorkerRig(t)
		key := fullKey("ns", "k")
		a := owner(1, 1)
		o := r.apply(3, command{op: opAcquire, key: key, owner: a, ttlMs: 10000})
		r.master(true)
		s := newSink()
		r.request(Request{Op: OpRelease, Key: "k", Owner: a, Token: o.token, ReqID: 1, Sink: s})
		if !r.fg.failNext(tc.err) {
			t.Fatalf("%v: the release was not proposed", tc.err)
		}
		if resp, ok := s.resps[1]; !ok || resp.Status != tc.want {
			t.Errorf("release failed with %v answered %+v (%v), want %v", tc.err, resp, ok, tc.want)
		}
	}
}
