package group

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// timedOut reports whether s was told that wait waitID timed out.
func timedOut(s *testSink, waitID uint64) bool {
	return s.count(func(m wire.Message) bool {
		g, ok := m.(*wire.Granted)
		return ok && g.WaitID == waitID && g.Status == wire.StatusTimeout
	}) > 0
}

// overdueGrant sets up a worker rig where owner 1/1 held "k" (request
// 1), owner 2/1 queued for it with a 1 s MaxWait and WaitID 7 (request
// 2), and the holder's release (request 3), which grants the key to the
// waiter, is still in flight when the waiter's deadline passes.
func overdueGrant(t *testing.T) (*workerRig, *testSink) {
	t.Helper()
	r := newWorkerRig(t)
	s := newSink()
	a, b := owner(1, 1), owner(2, 1)
	r.master(true)
	r.request(Request{Op: OpAcquire, Key: "k", Owner: a, TTL: time.Minute, ReqID: 1, Sink: s})
	r.fg.chooseAll()
	tok := s.resps[1].Token
	if s.resps[1].Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", s.resps[1])
	}
	r.request(Request{Op: OpAcquire, Key: "k", Owner: b, MaxWait: time.Second, WaitID: 7, ReqID: 2, Sink: s})
	if s.resps[2].Status != wire.StatusLockWait {
		t.Fatalf("wait: %+v", s.resps[2])
	}
	// The release hands the key to b; it stays in flight.
	r.request(Request{Op: OpRelease, Key: "k", Owner: a, Token: tok, ReqID: 3, Sink: s})
	if n := r.fg.pending(); n != 1 {
		t.Fatalf("%d proposals in flight, want the release granting b", n)
	}
	// b's deadline passes while the grant is in flight.
	r.fc.Advance(2 * time.Second)
	if timedOut(s, 7) {
		t.Fatal("the waiter timed out while a grant to it was in flight")
	}
	return r, s
}

// TestWaitDeadlineDuringFailedGrant: a waiter's MaxWait deadline that
// passes while a command granting it the key is in flight is not lost:
// when that command fails, the waiter is told it timed out instead of
// being left waiting for ever.
func TestWaitDeadlineDuringFailedGrant(t *testing.T) {
	t.Parallel()
	r, s := overdueGrant(t)
	// The command fails (say the queue was full).
	r.fg.failNext(paxos.ErrOverloaded)
	if !timedOut(s, 7) {
		t.Fatal("the waiter whose deadline passed during a failed grant was not told it timed out")
	}
	if ks := r.w.keys[fullKey("ns", "k")]; ks != nil && len(ks.waiters) != 0 {
		t.Fatalf("%d waiters left", len(ks.waiters))
	}
}

// TestWaitDeadlineDuringInDoubtGrant: when the command granting a waiter
// the key fails with its outcome unknown (the replica stopped with it in
// flight; the next master may still choose it) after the waiter's
// deadline passed, the waiter is not told it timed out, which would
// leave its client unaware that it may hold the key: it is told
// NO_MASTER when this node gives up mastership, and asks the next master.
func TestWaitDeadlineDuringInDoubtGrant(t *testing.T) {
	t.Parallel()
	r, s := overdueGrant(t)
	r.fg.failNext(fmt.Errorf("%w: %w", paxos.ErrOutcomeUnknown, paxos.ErrStopped))
	if timedOut(s, 7) {
		t.Fatal("the waiter of an in-doubt grant was told it timed out")
	}
	if st := s.resps[3].Status; st != wire.StatusTimeout {
		t.Fatalf("in-doubt release answered %v, want TIMEOUT", st)
	}
	r.master(false)
	if s.count(func(m wire.Message) bool {
		g, ok := m.(*wire.Granted)
		return ok && g.WaitID == 7 && g.Status == wire.StatusNoMaster
	}) == 0 {
		t.Fatal("the waiter of an in-doubt grant was not told NO_MASTER when the node gave up mastership")
	}
	if timedOut(s, 7) {
		t.Fatal("the waiter of an in-doubt grant was told it timed out")
	}
}

// deadSink is a testSink whose connection can be closed for good.
type deadSink struct {
	*testSink
	closed atomic.Bool
}

func (s *deadSink) Closed() bool { return s.closed.Load() }

// TestForgetDropsDeferred: a request parked behind a change in flight
// (ks.deferred) of a client that is then forgotten is dropped, not run
// after the change: run, it would become a ghost waiter granted the lock,
// which would then sit held by a dead client for its TTL.
func TestForgetDropsDeferred(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	s := newSink()
	dead := &deadSink{testSink: newSink()}
	a, b := owner(1, 1), owner(2, 1)
	r.master(true)
	r.request(Request{Op: OpAcquire, Key: "k", Owner: a, TTL: time.Minute, ReqID: 1, Sink: s})
	r.fg.chooseAll()
	tok := s.resps[1].Token
	// a's release is in flight; b's wait is parked behind it.
	r.request(Request{Op: OpRelease, Key: "k", Owner: a, Token: tok, ReqID: 2, Sink: s})
	r.request(Request{Op: OpAcquire, Key: "k", Owner: b, MaxWait: -1, WaitID: 3, ReqID: 3, Sink: dead})
	key := fullKey("ns", "k")
	if ks := r.w.keys[key]; ks == nil || len(ks.deferred) != 1 {
		t.Fatal("b's request was not deferred")
	}
	// b's connection closes.
	dead.closed.Store(true)
	r.w.post(event{kind: evForget, client: 2, sink: dead})
	r.fg.chooseAll() // the release's outcome
	if ks := r.w.keys[key]; ks != nil && (ks.busy || len(ks.waiters) != 0 || len(ks.deferred) != 0) {
		t.Fatalf("the forgotten client's request went on: busy %v, %d waiters, %d deferred", ks.busy, len(ks.waiters), len(ks.deferred))
	}
	if _, ok := r.w.refs[dead]; ok || len(r.w.waits) != 0 {
		t.Fatalf("by-connection indexes left: %d waits, ref %v", len(r.w.waits), ok)
	}
}

// TestNoRefForClosedConnection: an acquire in flight when its connection
// closes and is forgotten does not leave a sinkRef for that connection in
// w.refs (the outcome must not recreate it, since nothing would forget it).
func TestNoRefForClosedConnection(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	dead := &deadSink{testSink: newSink()}
	r.master(true)
	r.request(Request{Op: OpAcquire, Key: "k", Owner: owner(2, 1), TTL: time.Minute, ReqID: 1, Sink: dead})
	dead.closed.Store(true)
	r.w.post(event{kind: evForget, client: 2, sink: dead})
	r.fg.chooseAll()
	if resp := dead.resps[1]; resp.Status != wire.StatusSuccess {
		t.Fatalf("acquire answered %+v", resp)
	}
	if _, ok := r.w.refs[dead]; ok {
		t.Fatal("w.refs holds a connection that closed and was forgotten")
	}
}
