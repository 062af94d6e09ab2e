package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// workerRig drives one worker by hand, without its goroutine: events are
// handled when the test says so. Its paxos group is either a lone replica
// that becomes master (proposals are chosen and their results queued for
// the worker), or one replica of three that never starts, so that every
// proposal fails at once with ErrNotMaster. The worker's own view of
// mastership is set by the test alone.
type workerRig struct {
	t  *testing.T
	fc *fakeClock
	sm *StateMachine
	kv *memKV
	w  *worker
}

func newWorkerRig(t *testing.T, master bool) *workerRig {
	st := openStore(t, t.TempDir())
	host := paxos.NewHost(paxos.HostConfig{Self: 1, Store: st, Tick: 5 * time.Millisecond, Logger: testutil.Logger()})
	sm := NewStateMachine(1)
	peers := []paxos.NodeID{1, 2, 3}
	if master {
		peers = peers[:1]
	}
	px, err := host.AddGroup(paxos.GroupConfig{Core: paxos.Config{Group: 1, Peers: peers, HeartbeatTicks: 5, LeaseTicks: 20}}, sm)
	if err != nil {
		t.Fatal(err)
	}
	if master {
		host.Start()
		testutil.Eventually(t, 30*time.Second, func() bool { return px.Status().Serving }, "the lone replica to become master")
	}
	t.Cleanup(func() {
		host.Stop()
		st.Close()
	})
	fc := newFakeClock()
	svc := &Service{cfg: Config{Workers: 1, Clock: fc, Logger: testutil.Logger()}}
	svc.cfg.setDefaults()
	lg := &LockGroup{svc: svc, px: px, sm: sm, leaseCheck: func() bool { return true }}
	w := newWorker(lg, 0)
	w.manual = true
	lg.workers = []*worker{w}
	return &workerRig{t: t, fc: fc, sm: sm, kv: newMemKV(), w: w}
}

// waitQueued waits until n events are queued for the worker.
func (r *workerRig) waitQueued(n int) {
	testutil.Eventually(r.t, 30*time.Second, func() bool {
		r.w.mu.Lock()
		defer r.w.mu.Unlock()
		return len(r.w.q) >= n
	}, "%d events queued for the worker", n)
}

// take removes and returns the events queued for the worker.
func (r *workerRig) take() []event {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	q := r.w.q
	r.w.q = nil
	return q
}

// drain handles queued events (and those they cause) as run does.
func (r *workerRig) drain() {
	for {
		r.w.armTimer()
		q := r.take()
		if len(q) == 0 {
			return
		}
		for i := range q {
			r.w.handle(&q[i])
		}
	}
}

func (r *workerRig) apply(inst uint64, c command) *outcome {
	res := make([]any, 1)
	r.sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, r.kv, res)
	return res[0].(*outcome)
}

func (r *workerRig) request(req Request) {
	req.Namespace = "ns"
	req.Hash = wire.KeyHash("ns", req.Key)
	r.w.handle(&event{kind: evRequest, req: &req})
}

func (r *workerRig) master(serving bool) {
	r.w.handle(&event{kind: evMaster, serving: serving})
}

// TestStaleResultAnsweredAndIgnored: the outcome of a proposal made
// under a mastership the worker has since lost (and regained) is told to
// its requester, and does not unblock the key's change of the new term,
// which would let two changes of one key be in flight (and share an
// instance, breaking I2).
func TestStaleResultAnsweredAndIgnored(t *testing.T) {
	r := newWorkerRig(t, true)
	key := fullKey("ns", "k")
	s := newSink()
	a := owner(1, 1)
	r.master(true)
	r.request(Request{Op: OpAcquire, Key: "k", Owner: a, ReqID: 1, Sink: s})
	r.waitQueued(1)
	old := r.take()
	if old[0].kind != evResult {
		t.Fatalf("queued %+v, want the acquire's result", old)
	}
	// Mastership goes and comes back before the acquire's outcome
	// reaches the worker; the new term releases the lock meanwhile.
	r.master(false)
	r.master(true)
	out := old[0].res.Value.(*outcome)
	r.request(Request{Op: OpRelease, Key: "k", Owner: a, Token: out.token, ReqID: 2, Sink: s})
	r.w.handle(&old[0])
	if resp, ok := s.resps[1]; !ok || resp.Status != wire.StatusSuccess || resp.Token != out.token {
		t.Fatalf("stale requester answered %+v (%v), want SUCCESS with token %d", resp, ok, out.token)
	}
	ks := r.w.keys[key]
	if ks == nil || !ks.busy {
		t.Fatal("a stale result unblocked the key while the new term's change is in flight")
	}
	// An acquire for the key waits for the release in flight.
	r.request(Request{Op: OpAcquire, Key: "k", Owner: owner(3, 1), ReqID: 3, Sink: s})
	if len(ks.deferred) != 1 {
		t.Fatal("a request was handled while another change of its key was in flight")
	}
	r.waitQueued(1)
	r.drain() // the release's outcome; then the deferred acquire is proposed
	if resp := s.resps[2]; resp.Status != wire.StatusSuccess {
		t.Fatalf("release answered %+v", resp)
	}
	r.waitQueued(1)
	r.drain()
	if resp := s.resps[3]; resp.Status != wire.StatusSuccess || resp.Token <= out.token {
		t.Fatalf("acquire after the release answered %+v (old token %d)", resp, out.token)
	}
}

// TestFailedExpireIsRetried: an Expire that could not be proposed (here
// the group is not master; in life an overloaded queue or a lost lease) is
// proposed again, rather than leaving the lock held for good.
func TestFailedExpireIsRetried(t *testing.T) {
	r := newWorkerRig(t, false)
	key := fullKey("ns", "k")
	a := owner(1, 1)
	if o := r.apply(3, command{op: opAcquire, key: key, owner: a, ttlMs: 1000}); o.status != wire.StatusSuccess {
		t.Fatal(o.status)
	}
	r.master(true)
	r.drain()
	deadline := func() (time.Time, bool) {
		ns, ok := r.sm.deadline(key, a, 3)
		return r.w.timeOf(ns), ok && ns != 0
	}
	if d, _ := deadline(); !d.Equal(r.fc.Now().Add(time.Second)) {
		t.Fatalf("deadline %v after take-over, want now+1s", d)
	}
	r.fc.Advance(time.Second)
	for i := range 3 {
		r.drain() // the timer fires, the Expire is proposed and fails
		if ks := r.w.keys[key]; ks != nil && ks.busy {
			t.Fatalf("round %d: key state %+v", i, ks)
		}
		d, ok := deadline()
		if !ok || !d.After(r.fc.Now()) {
			t.Fatalf("round %d: after a failed Expire the hold has no future deadline (%v, %v)", i, d, ok)
		}
		r.fc.Advance(d.Sub(r.fc.Now()))
	}
}

// TestExpiryHeapDropsStaleEntries: released holds' deadline entries are
// dropped once they are more than half the heap, and the heap still
// yields the live deadlines in order.
func TestExpiryHeapDropsStaleEntries(t *testing.T) {
	r := newWorkerRig(t, false)
	r.master(true)
	const n, released = 2048, 1536
	now := r.fc.Now()
	for i := range n {
		key := fullKey("ns", fmt.Sprint("k", i))
		o := r.apply(uint64(i+1), command{op: opAcquire, key: key, owner: owner(1, uint64(i)), ttlMs: 1000})
		if o.status != wire.StatusSuccess {
			t.Fatal(o.status)
		}
		r.w.hold(key, o.token, owner(1, uint64(i)), nil, now.Add(time.Duration(i*7919%n)*time.Millisecond))
	}
	for i := range released {
		key := fullKey("ns", fmt.Sprint("k", i))
		if o := r.apply(uint64(n+i+1), command{op: opRelease, key: key, owner: owner(1, uint64(i)), token: uint64(i + 1)}); o.status != wire.StatusSuccess {
			t.Fatal(o.status)
		}
		r.w.staled()
	}
	// The compaction ran once, at the 1025th release.
	if got, want := len(r.w.expiry), n-(n/2+1); got != want {
		t.Fatalf("%d entries left, want %d", got, want)
	}
	var last int64
	live := 0
	for len(r.w.expiry) > 0 {
		e := r.w.expiry.pop()
		if e.at < last {
			t.Fatalf("deadline %d after %d", e.at, last)
		}
		last = e.at
		if dl, ok := r.sm.deadline(e.key, e.owner, e.token); ok && dl == e.at {
			live++
		}
	}
	if live != n-released {
		t.Fatalf("%d live entries, want %d", live, n-released)
	}
}
