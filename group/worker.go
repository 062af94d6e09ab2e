package group

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

type evKind uint8

const (
	evRequest evKind = iota
	evResult
	evMaster
	evForget
	evRevoke
	evTimer
	evStop
	evInspect
	evList
	evMulti     // reserve the next keys of a multi-acquire (multi.go)
	evMultiDone // a multi-acquire's outcome, for key n
	evMultiUndo // a failed multi-acquire gives back key n's reservation
	evMove      // a namespace's move state was applied: req.Namespace, MoveState(n) (move_worker.go)
	evAttach    // a connection of client was attached: tell it its revoked holds (revocation.go)
	evKeyRead   // an operator's read of one key: keyq (inspect_key.go)
	evLongHolds // a metrics scrape's count of holds served longer than since (maxhold.go)
)

type event struct {
	kind    evKind
	req     *Request
	res     paxos.Result
	pend    *pending
	serving bool
	client  uint64
	sink    Sink
	done    chan struct{}  // evStop: closed when the worker stopped
	revoked func()         // evRevoke: called once it is handled (or dropped); req.Namespace is the session's
	inspect func([]HotKey) // evInspect: called with the worker's hot keys (nil if dropped)
	n       int            // evInspect: how many; evMove: the MoveState
	list    *listQuery     // evList: what to list; its reply is called once
	multi   *multiAcq      // evMulti, evMultiDone, evMultiUndo
	keyq    *keyQuery      // evKeyRead: its done is called once
	counted func(int)      // evLongHolds: called once with the count (0 if dropped)
	since   time.Duration  // evLongHolds: the threshold
}

// keyState is what the master's worker knows of one key beyond the
// replicated record while something is going on: a change in flight and
// the requests deferred behind it, waiters, watchers. A key that is only
// held has none (its deadline is in the expiry heap).
type keyState struct {
	busy     bool
	deferred []*Request
	waiters  []*waiter
	watchers []*watcher
	// multis are multi-acquires waiting to reserve the key once the
	// change in flight ends (see multi.go).
	multis []*multiAcq
}

func (ks *keyState) empty() bool {
	return !ks.busy && len(ks.deferred) == 0 && len(ks.waiters) == 0 && len(ks.watchers) == 0 && len(ks.multis) == 0
}

// workerEnv is what a worker is handed by its service at construction:
// all it reads of the node beyond its group's table and consensus.
type workerEnv struct {
	cfg     *Config      // the service's, with defaults
	obs     Observer     // cfg.Observer, nil for none
	use     *usage       // waits and watches per connection and namespace
	quota   *quotaTable  // the namespaces' quotas
	clients *clientSinks // the node's connections by client id
	adm     admission    // the service's quota decisions
}

// admission is what a worker asks the service on the request path: the
// namespaces' rate and held quotas are shared by all of the node's
// groups, and its share of them depends on how many it serves.
type admission interface {
	rateOK(e *nsQuota, r *Request) (bool, uint32)
	chargeRate(e *nsQuota, r *Request)
	heldOK(ns string, n int64) bool
	heldRoom(ns string, n, gone, rest int) int
	multiAdmits(m *multiAcq) (wire.Response, bool)
	waitersQuota(ns string) int64
	refusedWaiter(ns string)
}

// worker decides for the keys that hash to it, on the master. All its
// state is owned by its goroutine; everything reaches it as an event.
type worker struct {
	g     *Group
	idx   int
	clock Clock
	workerEnv

	mu      sync.Mutex
	q       []event
	spare   []event
	closed  bool
	running bool // a goroutine is running the worker (see post)
	serving bool

	keys   map[string]*keyState
	term   uint64 // counts mastership changes; see onResult
	seq    uint64
	timers timerHeap // waiters' and watches' deadlines
	// times is the master's deadline and start of every hold it set one
	// for, and the expiry heap: master-only soft state, never replicated
	// (see holdTimes).
	times   holdTimes
	timer   Timer
	timerAt time.Time
	base    time.Time // origin of mono

	// By connection: the sinkRef its holds point to, its waiters and
	// its watches, so that a closed connection costs what it had.
	refs     map[Sink]*sinkRef
	waits    map[Sink]map[*waiter]struct{}
	watching map[Sink]map[*watcher]struct{}
	// defers counts, by connection and key, the requests parked in
	// keyState.deferred, so that forget finds them.
	defers map[Sink]map[string]int
	// early holds the requests that reached this node after it won its
	// Paxos group's election and before it serves (it is applying the
	// instances chosen before its ballot, usually a millisecond or two):
	// they are decided the moment it serves, instead of answered NO_MASTER
	// into a client's backoff. earlyUntil bounds the wait (see earlyLimit).
	early      []*Request
	earlyUntil time.Time
	// revoked: the holds an operator force-unlocked that have not ended
	// (see revocation.go).
	revoked revocations
	// nwait and nwatch count the waiters and watchers indexed above, for
	// Group.Waiting (read off the worker's goroutine).
	nwait, nwatch atomic.Int64
	// delays holds, per key in a lock-delay, when the delay ends on this
	// master's clock (worker.mono); see lockdelay.go.
	delays map[string]int64
}

func newWorker(g *Group, idx int, env workerEnv) *worker {
	return &worker{
		g:         g,
		idx:       idx,
		clock:     env.cfg.Clock,
		workerEnv: env,
		keys:      make(map[string]*keyState),
		times:     newHoldTimes(),
		base:      env.cfg.Clock.Now().Add(-time.Second), // mono(now) > 0
		refs:      make(map[Sink]*sinkRef),
		waits:     make(map[Sink]map[*waiter]struct{}),
		watching:  make(map[Sink]map[*watcher]struct{}),
		defers:    make(map[Sink]map[string]int),
	}
}

// deferReq parks r behind the change in flight on key.
func (w *worker) deferReq(ks *keyState, key string, r *Request) {
	ks.deferred = append(ks.deferred, r)
	m := w.defers[r.Sink]
	if m == nil {
		m = make(map[string]int)
		w.defers[r.Sink] = m
	}
	m[key]++
}

// undefer takes r off the deferred index of key.
func (w *worker) undefer(key string, r *Request) {
	m := w.defers[r.Sink]
	if m == nil {
		return
	}
	if m[key]--; m[key] <= 0 {
		delete(m, key)
		if len(m) == 0 {
			delete(w.defers, r.Sink)
		}
	}
}

// post hands the worker an event. There is no goroutine per worker: the
// goroutine that posts to an idle worker runs it — the gnet loop for a
// request, the paxos loop for a result, a timer for a deadline — until its
// queue is empty; events posted meanwhile (also by the worker itself, as
// when a proposal fails at once) are queued for that runner. This saves
// two goroutine switches per request without letting two goroutines into
// the worker's state at once. Nothing the worker does blocks.
func (w *worker) post(e event) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		switch e.kind {
		case evRequest:
			w.respond(e.req, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 100})
		case evResult:
			w.staleResult(e.pend, e.res)
		case evStop:
			close(e.done) // stopped already: nothing is left to stop
		case evRevoke:
			e.revoked() // not a master: nothing to revoke
		case evInspect:
			e.inspect(nil)
		case evList:
			e.list.reply(nil, 0)
		case evKeyRead:
			e.keyq.done(nil)
		case evLongHolds:
			e.counted(0)
		case evMulti:
			w.multiFail(e.multi, noMaster)
		}
		return
	}
	w.q = append(w.q, e)
	if w.running {
		w.mu.Unlock()
		return
	}
	w.running = true
	for len(w.q) > 0 {
		batch := w.q
		w.q = w.spare[:0]
		w.mu.Unlock()
		for i := range batch {
			w.handle(&batch[i])
		}
		w.armTimer()
		clear(batch)
		w.mu.Lock()
		w.spare = batch[:0]
	}
	w.running = false
	w.mu.Unlock()
}

func (w *worker) submit(r *Request) { w.post(event{kind: evRequest, req: r}) }

// stop drops the worker's master-only state and refuses further events.
func (w *worker) stop() {
	done := make(chan struct{})
	w.post(event{kind: evStop, done: done})
	<-done
}

func (w *worker) handle(e *event) {
	switch e.kind {
	case evStop:
		w.loseMastership()
		w.refuseEarly()
		if w.timer != nil {
			w.timer.Stop()
		}
		w.mu.Lock()
		w.closed = true
		rest := w.q
		w.q = nil
		w.mu.Unlock()
		for i := range rest {
			switch rest[i].kind {
			case evRequest:
				w.respond(rest[i].req, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 100})
			case evResult:
				w.staleResult(rest[i].pend, rest[i].res)
			case evStop:
				close(rest[i].done)
			case evRevoke:
				rest[i].revoked()
			case evInspect:
				rest[i].inspect(nil)
			case evList:
				rest[i].list.reply(nil, 0)
			case evKeyRead:
				rest[i].keyq.done(nil)
			case evLongHolds:
				rest[i].counted(0)
			case evMulti:
				w.multiFail(rest[i].multi, noMaster)
			}
		}
		close(e.done)
	case evRequest:
		w.onRequest(e.req)
	case evResult:
		w.onResult(e.pend, e.res)
	case evMaster:
		if e.serving && !w.serving {
			w.becomeMaster()
			w.resumeDelays()
		} else if !e.serving && w.serving {
			w.loseMastership()
			w.delays = nil
		}
		w.releaseEarly()
	case evForget:
		w.forget(e.client, e.sink)
	case evAttach:
		w.tellClientRevoked(e.client, e.sink)
	case evRevoke:
		w.revoke(e.client, e.req.Namespace, e.sink)
		e.revoked()
	case evTimer:
		w.fireTimers()
	case evInspect:
		e.inspect(w.hotKeys(e.n))
	case evList:
		e.list.reply(w.listLocks(e.list))
	case evKeyRead:
		e.keyq.done(w.inspectKey(e.keyq))
	case evLongHolds:
		e.counted(w.longHolds(e.since))
	case evMulti:
		w.multiReserve(e.multi)
	case evMultiDone:
		w.multiDone(e.multi, e.n, e.res)
	case evMultiUndo:
		w.multiUndo(e.multi, e.n)
	case evMove:
		w.onMove(e.req.Namespace, MoveState(e.n))
	}
}

// respond answers r, and tells the Observer how long r took when the
// server stamped it.
func (w *worker) respond(r *Request, resp wire.Response) {
	if r != nil && r.Sink != nil {
		r.mark(StageResponded, resp.Status, nil)
		r.Sink.Respond(r.ReqID, resp)
		if obs := w.obs; obs != nil && r.Start != 0 {
			obs.Responded(r.Op, resp.Status, time.Duration(Nanotime()-r.Start))
		}
	}
}

func (w *worker) key(r *Request) string { return fullKey(r.Namespace, r.Key) }

func (w *worker) state(key string) *keyState {
	ks := w.keys[key]
	if ks == nil {
		ks = &keyState{}
		w.keys[key] = ks
	}
	return ks
}

func (w *worker) tidy(key string, ks *keyState) {
	if ks.empty() {
		delete(w.keys, key)
	}
}
