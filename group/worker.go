package group

import (
	"container/heap"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/clock"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// Clock is the monotonic clock the master measures deadlines with (TTLs,
// waits, watches). RealClock is the process's; tests use a fake one. The
// functions the workers schedule with AfterFunc only post to a worker, so
// they return at once.
type Clock = clock.Clock

// Timer is a call scheduled by Clock.AfterFunc. The worker ignores what
// its Stop reports: a call that runs anyway finds nothing due.
type Timer = clock.Timer

// RealClock is the process's monotonic clock.
type RealClock = clock.Real

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
	revoked func()         // evRevoke: called once it is handled (or dropped)
	inspect func([]HotKey) // evInspect: called with the worker's hot keys (nil if dropped)
	n       int            // evInspect: how many
	list    *listQuery     // evList: what to list; its reply is called once
	multi   *multiAcq      // evMulti, evMultiDone, evMultiUndo
}

// pending is a proposal in flight and what to do with its outcome.
type pending struct {
	term uint64 // the worker's mastership term it was proposed in
	// grantedAt: a release's hold was granted then (worker.mono; 0:
	// unknown or no Observer).
	grantedAt int64
	cmd       command
	req       *Request  // the requester to answer, nil for expire and grants
	grants    []*waiter // waiters the command grants to, in cmd.grants order
	lost      expiry    // expire: the deadline that passed
	// valueChanged: an acquire by the holder (a reacquire) or a renew
	// gives the hold a value other than the one it had; its watchers
	// are told once it is applied.
	valueChanged bool
	// forced: the expire of a revoked hold (acknowledged by its holder's
	// release, or at its deadline; see revocation.go); its holder and
	// watchers hear EventRevoked, not EventExpired.
	forced bool
	// handOff: a release whose cmd.grants[0] is req.HandOff, not a
	// queued waiter (see Request.HandOff).
	handOff bool
}

type waiter struct {
	req *Request
	key string
	seq uint64
	// rank orders the key's queue, lowest first (then seq): the arrival
	// time (w.mono) minus weight × Config.WeightAging. A waiter of weight
	// w queues as if it had arrived w × WeightAging earlier, so a heavier
	// waiter overtakes a lighter one by at most their weights' difference
	// × WeightAging and no waiter starves (see queueAhead).
	rank     int64
	since    int64 // when it joined the queue (w.mono; 0: no Observer)
	deadline time.Time
	granting bool
	gone     bool
	// overdue: the deadline passed while a grant was in flight; if the
	// grant does not happen, the waiter times out then.
	overdue bool
}

type watcher struct {
	id         uint64
	key        string
	sink       Sink
	token      uint64
	continuous bool
	deadline   time.Time
	gone       bool
}

// sinkRef is the connection a hold's Lost goes to. Every hold taken over
// one connection points to the same sinkRef, so forgetting the connection
// is one store, however many locks it holds.
type sinkRef struct{ sink Sink }

// expiry is a hold's deadline on the master. A hold is named by token and
// owner (readers admitted in one hand-off share a token). The expiry heap
// holds one entry per deadline set; the hold's record in the state machine carries the
// current one (holder.deadline), so an entry whose hold was renewed,
// released or expired meanwhile is recognised and skipped when it comes
// up. A held key needs no keyState on the master: this entry (56 bytes)
// is all it costs there.
type expiry struct {
	at    int64 // on the worker's clock, see worker.mono
	key   string
	token uint64
	owner wire.Owner
	sink  *sinkRef // nil: nobody to tell
}

// expiryHeap is a min-heap of deadlines (by hand: container/heap would
// box every entry).
type expiryHeap []expiry

func (h *expiryHeap) push(e expiry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *expiryHeap) down(i int) {
	s := *h
	for {
		l := 2*i + 1
		if l >= len(s) {
			return
		}
		m := l
		if r := l + 1; r < len(s) && s[r].at < s[l].at {
			m = r
		}
		if s[i].at <= s[m].at {
			return
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
}

func (h *expiryHeap) pop() expiry {
	s := *h
	e := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = expiry{}
	*h = s[:n]
	h.down(0)
	if cap(s) >= 4096 && n < cap(s)/4 {
		// Most deadlines passed: give the memory back.
		*h = append(make(expiryHeap, 0, 2*n), s[:n]...)
	}
	return e
}

func (h *expiryHeap) init() {
	for i := len(*h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
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

type timerKind uint8

const (
	tWait timerKind = iota
	tWatch
	tDelay // the end of a key's lock-delay (lockdelay.go)
)

// timerEntry is a waiter's or a watch's deadline.
type timerEntry struct {
	at   time.Time
	kind timerKind
	key  string
	w    *waiter
	wt   *watcher
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// worker decides for the keys that hash to it, on the master. All its
// state is owned by its goroutine; everything reaches it as an event.
type worker struct {
	g     *Group
	idx   int
	clock Clock

	mu      sync.Mutex
	q       []event
	spare   []event
	closed  bool
	running bool // a goroutine is running the worker (see post)
	serving bool

	keys    map[string]*keyState
	term    uint64 // counts mastership changes; see onResult
	seq     uint64
	timers  timerHeap  // waiters' and watches' deadlines
	expiry  expiryHeap // holds' deadlines
	stale   int        // entries of expiry known to be stale, roughly
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
	// early holds the requests that reached this node after it won the
	// group's election and before it serves (it is applying the instances
	// chosen before its ballot, usually a millisecond or two): they are
	// decided the moment it serves, instead of answered NO_MASTER into a
	// client's backoff. earlyUntil bounds the wait (see earlyLimit).
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

func newWorker(g *Group, idx int) *worker {
	return &worker{
		g:        g,
		idx:      idx,
		clock:    g.svc.cfg.Clock,
		keys:     make(map[string]*keyState),
		base:     g.svc.cfg.Clock.Now().Add(-time.Second), // mono(now) > 0
		refs:     make(map[Sink]*sinkRef),
		waits:    make(map[Sink]map[*waiter]struct{}),
		watching: make(map[Sink]map[*watcher]struct{}),
		defers:   make(map[Sink]map[string]int),
	}
}

// closer is implemented by a Sink that can tell its connection closed for
// good (the server's connections do).
type closer interface{ Closed() bool }

// closedSink reports whether sink's connection closed for good.
func closedSink(sink Sink) bool {
	c, ok := sink.(closer)
	return ok && c.Closed()
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

// mono converts a time on the worker's clock to nanoseconds since a second
// before the worker started (so > 0; 0 means unknown), the form stored in
// holder.deadline and expiry.at.
func (w *worker) mono(t time.Time) int64 { return int64(t.Sub(w.base)) }

// timeOf is the inverse of mono.
func (w *worker) timeOf(ns int64) time.Time { return w.base.Add(time.Duration(ns)) }

// ref returns the sinkRef of sink (nil for none, or for a connection that
// closed: forget has run or will run for it, and a ref made now would
// never be forgotten).
func (w *worker) ref(sink Sink) *sinkRef {
	if sink == nil || closedSink(sink) {
		return nil
	}
	r := w.refs[sink]
	if r == nil {
		r = &sinkRef{sink: sink}
		w.refs[sink] = r
	}
	return r
}

// index and unindex keep a waiter in the by-connection index.
func (w *worker) index(q *waiter) {
	m := w.waits[q.req.Sink]
	if m == nil {
		m = make(map[*waiter]struct{})
		w.waits[q.req.Sink] = m
	}
	if _, ok := m[q]; !ok {
		w.nwait.Add(1)
	}
	m[q] = struct{}{}
}

func (w *worker) unindex(q *waiter) {
	if m := w.waits[q.req.Sink]; m != nil {
		if _, ok := m[q]; ok {
			w.nwait.Add(-1)
			w.g.svc.use.give(useWait, q.req.Sink, q.req.Namespace)
		}
		delete(m, q)
		if len(m) == 0 {
			delete(w.waits, q.req.Sink)
		}
	}
}

// indexWatch and unindexWatch keep a watcher in the by-connection index.
func (w *worker) indexWatch(wt *watcher) {
	m := w.watching[wt.sink]
	if m == nil {
		m = make(map[*watcher]struct{})
		w.watching[wt.sink] = m
	}
	if _, ok := m[wt]; !ok {
		w.nwatch.Add(1)
	}
	m[wt] = struct{}{}
}

func (w *worker) unindexWatch(wt *watcher) {
	if m := w.watching[wt.sink]; m != nil {
		if _, ok := m[wt]; ok {
			w.nwatch.Add(-1)
			ns, _ := splitFull(wt.key)
			w.g.svc.use.give(useWatch, wt.sink, ns)
		}
		delete(m, wt)
		if len(m) == 0 {
			delete(w.watching, wt.sink)
		}
	}
}

// post hands the worker an event. There is no goroutine per worker: the
// goroutine that posts to an idle worker runs it — the gnet loop for a
// request, the paxos loop for a result, a timer for a deadline — until its
// queue is empty; events posted meanwhile (also by the worker itself, as
// when a proposal fails at once) are queued for that runner. This saves
// two goroutine hand-offs per request without letting two goroutines into
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
			e.list.reply(nil)
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
				rest[i].list.reply(nil)
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
	case evRevoke:
		w.revoke(e.client, e.sink)
		e.revoked()
	case evTimer:
		w.fireTimers()
	case evInspect:
		e.inspect(w.hotKeys(e.n))
	case evList:
		e.list.reply(w.listLocks(e.list))
	case evMulti:
		w.multiReserve(e.multi)
	case evMultiDone:
		w.multiDone(e.multi, e.n, e.res)
	case evMultiUndo:
		w.multiUndo(e.multi, e.n)
	}
}

// respond answers r, and tells the Observer how long r took when the
// server stamped it.
func (w *worker) respond(r *Request, resp wire.Response) {
	if r != nil && r.Sink != nil {
		r.Sink.Respond(r.ReqID, resp)
		if obs := w.g.svc.obs; obs != nil && r.Start != 0 {
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

func (w *worker) ttl(r *Request) uint32 {
	cfg := &w.g.svc.cfg
	d := r.TTL
	if d <= 0 {
		d = cfg.DefaultTTL
	}
	d = min(max(d, cfg.MinTTL), cfg.MaxTTL)
	return uint32(d / time.Millisecond)
}

func (w *worker) onRequest(r *Request) {
	// The lease is checked on the monotonic clock for every request: a
	// master whose process was paused must not answer from its state.
	// The check and the answer are one step against a hand-off (see
	// Group.serve).
	w.g.serve.RLock()
	defer w.g.serve.RUnlock()
	if !w.serving || !w.g.leaseValid() {
		if !w.serving && w.holdEarly(r) {
			return
		}
		w.respond(r, noMaster)
		return
	}
	key := w.key(r)
	switch r.Op {
	case OpState:
		w.answerState(r, key)
		return
	case OpWatch:
		w.watch(r, key)
		if ks := w.keys[key]; ks != nil {
			w.tidy(key, ks) // a watch answered at once leaves nothing
		}
		return
	case OpUnwatch:
		if ks := w.keys[key]; ks != nil {
			for _, wt := range ks.watchers {
				if wt.id == r.WatchID && wt.sink == r.Sink {
					wt.gone = true
				}
			}
			ks.watchers = w.dropWatchers(ks.watchers)
			w.tidy(key, ks)
		}
		w.respond(r, wire.Response{Status: wire.StatusSuccess})
		return
	}
	ks := w.state(key)
	if ks.busy {
		w.deferReq(ks, key, r)
		return
	}
	switch r.Op {
	case OpForceRelease:
		w.forceRelease(r, key, ks)
	case OpAcquire:
		w.acquire(r, key, ks)
	case OpRenew:
		w.renew(r, key, ks)
	case OpRelease:
		w.release(r, key, ks)
	case OpCancelWait:
		w.cancelWait(r, key, ks)
	default:
		w.respond(r, wire.Response{Status: wire.StatusBadRequest, Msg: "unknown operation"})
	}
	w.tidy(key, ks)
}

// occupiedInfo fills the holder fields of a response from rec.
func (w *worker) occupiedInfo(resp *wire.Response, ks *keyState, rec *lockRec) {
	if rec.n() == 0 {
		return
	}
	h := rec.at(0)
	resp.Holder, resp.Token, resp.Kind, resp.Value = h.owner, h.token, rec.kind(), rec.value(0)
	if rec.kind() == wire.KindRead {
		resp.Readers = uint32(rec.n())
	}
	resp.TTLLeftMs = h.ttlMs
	if h.deadline != 0 {
		left := w.timeOf(h.deadline).Sub(w.clock.Now())
		resp.TTLLeftMs = uint32(max(left, 0) / time.Millisecond)
	}
	if ks != nil {
		resp.QueueLen = uint32(len(ks.waiters))
	}
	w.semInfo(resp, rec, "", false)
}

func (w *worker) answerState(r *Request, key string) {
	rec := w.g.sm.get(key)
	if rec.n() == 0 {
		resp := wire.Response{Status: wire.StatusLockDeleted}
		if ks := w.keys[key]; ks != nil {
			resp.QueueLen = uint32(len(ks.waiters))
		}
		w.delayInfo(&resp, key)
		w.respond(r, resp)
		return
	}
	resp := wire.Response{Status: wire.StatusSuccess}
	w.occupiedInfo(&resp, w.keys[key], rec)
	// Report the hold with the token asked about (a token check), else
	// the asker's own hold if it has one.
	if i := rec.findToken(r.Token); r.Token != 0 && i >= 0 {
		w.holdInfo(&resp, rec, i)
	} else if i := rec.find(r.Owner); i >= 0 && i != 0 {
		resp.Holder, resp.Token, resp.Value = rec.at(i).owner, rec.at(i).token, rec.value(i)
	}
	w.semInfo(&resp, rec, r.Key, true)
	w.delayInfo(&resp, key)
	w.respond(r, resp)
}

// holdInfo makes hold i of rec the one resp names: holder, token, value
// and TTL left.
func (w *worker) holdInfo(resp *wire.Response, rec *lockRec, i int) {
	h := rec.at(i)
	resp.Holder, resp.Token, resp.Value, resp.TTLLeftMs = h.owner, h.token, rec.value(i), h.ttlMs
	if h.deadline != 0 {
		left := w.timeOf(h.deadline).Sub(w.clock.Now())
		resp.TTLLeftMs = uint32(max(left, 0) / time.Millisecond)
	}
}

// rankOf is the queue rank of a request of weight wt arriving at now
// (worker.mono): see waiter.rank.
func (w *worker) rankOf(now int64, wt uint8) int64 {
	if wt == 0 {
		wt = wire.DefaultWeight
	}
	return now - int64(wt)*int64(w.g.svc.cfg.WeightAging)
}

// queueAhead reports whether q is served before a request of rank r that
// comes after it: ties go to the earlier arrival.
func queueAhead(q *waiter, rank int64) bool { return q.rank <= rank }

// blockedByQueue reports whether a new arrival of rank rank must wait
// behind queued waiters even though the lock could be granted: a waiter
// ranked ahead of it goes first (see waiter.rank), and new readers queue
// behind a waiting writer.
func blockedByQueue(ks *keyState, r *Request, rank int64) bool {
	for _, q := range ks.waiters {
		if queueAhead(q, rank) {
			return true
		}
		if r.Kind == wire.KindRead && exclusive(q.req.Kind) {
			return true
		}
	}
	return false
}

func (w *worker) acquire(r *Request, key string, ks *keyState) {
	if r.Flags.Has(wire.FlagDowngrade) {
		w.downgrade(r, key, ks)
		return
	}
	if r.Flags.Has(wire.FlagSetPermits) && r.Kind == wire.KindSemaphore {
		w.setPermits(r, key, ks)
		return
	}
	rec := w.g.sm.get(key)
	if r.Kind == wire.KindSemaphore && w.semMismatch(r, rec) {
		return
	}
	ok, again := canGrantReq(rec, r)
	if again && w.revokedHolder(key, rec, r.Owner) {
		w.respond(r, wire.Response{Status: wire.StatusRevoked, Msg: "force-unlocked by an operator; release the token"})
		return
	}
	var delayed time.Duration // what is left of the key's lock-delay
	if ok && !again {
		switch st, left := w.delayCheck(key, ks); st {
		case delayRunning:
			ok, delayed = false, left
		case delayEnding:
			w.deferReq(ks, key, r) // decided once the delay's end is applied
			return
		}
	}
	// The clock is read only when a queue is involved: a free key's
	// acquire (the common case) needs no rank.
	var now time.Time
	if ok && !again && len(ks.waiters) > 0 {
		now = w.clock.Now()
		if blockedByQueue(ks, r, w.rankOf(w.mono(now), r.Weight)) {
			ok = false
		}
	}
	if ok {
		p := &pending{req: r, cmd: command{op: opAcquire, key: key, owner: r.Owner, kind: r.Kind, ttlMs: w.ttl(r), value: r.Value, permits: r.Permits, limit: r.Limit, delayMs: lockDelayOf(r)}}
		if i := rec.find(r.Owner); again && i >= 0 {
			p.valueChanged = rec.value(i) != r.Value
		}
		w.propose(ks, p)
		return
	}
	// Re-sent by a client after a reconnect: the same wait, a new sink.
	if r.WaitID != 0 {
		for _, q := range ks.waiters {
			if q.req.Owner == r.Owner && q.req.WaitID == r.WaitID {
				w.unindex(q)
				q.req = r
				w.g.svc.use.take(&w.g.svc.cfg, useWait, r.Sink, r.Namespace, false)
				w.index(q)
				w.respond(r, wire.Response{Status: wire.StatusLockWait, QueueLen: uint32(len(ks.waiters))})
				return
			}
		}
	}
	if r.MaxWait == 0 {
		resp := wire.Response{Status: wire.StatusLockOccupied}
		w.occupiedInfo(&resp, ks, rec)
		if delayed > 0 {
			resp.RetryAfterMs = uint32((delayed + time.Millisecond - 1) / time.Millisecond)
			resp.Msg = "lock-delay"
		}
		w.respond(r, resp)
		return
	}
	if len(ks.waiters) >= w.g.svc.cfg.MaxWaiters {
		w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: 100, Msg: "too many waiters on key"})
		return
	}
	if !w.admit(useWait, r) {
		return
	}
	w.seq++
	if now.IsZero() {
		now = w.clock.Now()
	}
	q := &waiter{req: r, key: key, seq: w.seq, rank: w.rankOf(w.mono(now), r.Weight)}
	if w.g.svc.obs != nil {
		q.since = w.mono(now)
	}
	w.index(q)
	if r.MaxWait > 0 {
		q.deadline = now.Add(r.MaxWait)
		w.schedule(timerEntry{at: q.deadline, kind: tWait, key: key, w: q})
	}
	// Keep the queue ordered by rank, then arrival.
	i := len(ks.waiters)
	for i > 0 && !queueAhead(ks.waiters[i-1], q.rank) {
		i--
	}
	ks.waiters = append(ks.waiters, nil)
	copy(ks.waiters[i+1:], ks.waiters[i:])
	ks.waiters[i] = q
	w.respond(r, wire.Response{Status: wire.StatusLockWait, QueueLen: uint32(len(ks.waiters))})
	// A free key with waiters (say, the head timed out at the wrong
	// moment) is handed on at once.
	if rec.n() == 0 {
		w.grantWaiters(key, ks, nil)
	}
}

// pickGrants chooses the waiters that get the key once rest holds remain
// (of kind restKind): the head writer alone when none remain, or the
// leading readers when the rest are only readers (or none).
func pickGrants(ks *keyState, rest int, restKind wire.Kind) []*waiter {
	const maxGrants = 64
	var out []*waiter
	for _, q := range ks.waiters {
		if q.granting {
			return nil
		}
		if exclusive(q.req.Kind) {
			if len(out) == 0 && rest == 0 {
				out = append(out, q)
			}
			break
		}
		if rest > 0 && exclusive(restKind) {
			break
		}
		out = append(out, q)
		if len(out) == maxGrants {
			break
		}
	}
	return out
}

func (w *worker) grantsFor(ks *keyState, ws []*waiter) []grant {
	gs := make([]grant, len(ws))
	for i, q := range ws {
		q.granting = true
		gs[i] = grant{owner: q.req.Owner, kind: q.req.Kind, ttlMs: w.ttl(q.req), value: q.req.Value, permits: q.req.Permits, limit: q.req.Limit, delayMs: lockDelayOf(q.req)}
	}
	return gs
}

// grantWaiters hands a key that is free (or read-held) to its head
// waiters with one command.
func (w *worker) grantWaiters(key string, ks *keyState, rec *lockRec) {
	if ks.busy || w.delayHolds(key, ks) || len(ks.waiters) == 0 {
		return
	}
	ws := w.pick(ks, rec, wire.Owner{}, 0)
	if len(ws) == 0 {
		return
	}
	// A grant-only command: release nothing, then grant.
	w.propose(ks, &pending{grants: ws, cmd: command{op: opGrant, key: key, grants: w.grantsFor(ks, ws)}})
}

func (w *worker) renew(r *Request, key string, ks *keyState) {
	rec := w.g.sm.get(key)
	if st := checkHolder(rec, r.Owner, r.Token); st != wire.StatusSuccess {
		w.respond(r, wire.Response{Status: st})
		return
	}
	if w.isRevoked(key, r.Owner, r.Token) {
		w.respond(r, wire.Response{Status: wire.StatusRevoked, Msg: "force-unlocked by an operator; release the token"})
		return
	}
	var ttl uint32
	if r.TTL > 0 {
		ttl = w.ttl(r)
	}
	p := &pending{req: r, cmd: command{op: opRenew, key: key, owner: r.Owner, token: r.Token, ttlMs: ttl, setValue: r.SetValue, value: r.Value}}
	// A SetValue tells the watchers even when the value it sets is the
	// one this master's table holds: after a master change that table may
	// hold it because the new master recovered the same SetValue from the
	// log, applied without telling anyone (no worker proposed it here),
	// and the client's retry is then the only news its watchers get.
	// Clients drop an event that repeats what they saw.
	p.valueChanged = r.SetValue
	w.propose(ks, p)
}

func checkHolder(rec *lockRec, o wire.Owner, token uint64) wire.Status {
	if rec.n() == 0 {
		return wire.StatusLockDeleted
	}
	i := rec.find(o)
	if i < 0 {
		return wire.StatusLockChangedOwner
	}
	if rec.at(i).token != token {
		return wire.StatusTokenError
	}
	return wire.StatusSuccess
}

// without counts rec's holds but owner's hold with token.
func without(rec *lockRec, owner wire.Owner, token uint64) int {
	n := 0
	for i := range rec.n() {
		if h := rec.at(i); h.token != token || h.owner != owner {
			n++
		}
	}
	return n
}

// downgrade proposes turning r.Owner's write hold into a read hold (see
// wire.FlagDowngrade). The state machine decides; the master only names
// the hold's token and answers what it can without a round.
func (w *worker) downgrade(r *Request, key string, ks *keyState) {
	rec := w.g.sm.get(key)
	i := rec.find(r.Owner)
	switch {
	case rec.n() == 0:
		w.respond(r, wire.Response{Status: wire.StatusLockDeleted})
		return
	case i < 0:
		w.respond(r, wire.Response{Status: wire.StatusLockChangedOwner})
		return
	case rec.at(i).kind == wire.KindExclusive:
		w.respond(r, wire.Response{Status: wire.StatusBadRequest, Msg: "an exclusive lock cannot be downgraded; use a read-write lock"})
		return
	case w.isRevoked(key, r.Owner, rec.at(i).token):
		w.respond(r, wire.Response{Status: wire.StatusRevoked, Msg: "force-unlocked by an operator; release the token"})
		return
	}
	w.propose(ks, &pending{req: r, cmd: command{op: opDowngrade, key: key, owner: r.Owner, kind: wire.KindRead, token: rec.at(i).token, ttlMs: w.ttl(r)}})
}

func (w *worker) release(r *Request, key string, ks *keyState) {
	rec := w.g.sm.get(key)
	if st := checkHolder(rec, r.Owner, r.Token); st != wire.StatusSuccess {
		if !r.HandOff.IsZero() && st != wire.StatusLockDeleted {
			// A retried hand-off that was applied: the hand-off owner
			// holds the key now. Say so again.
			if i := rec.find(r.HandOff); i >= 0 {
				h := rec.at(i)
				w.respond(r, wire.Response{Status: wire.StatusSuccess, Holder: r.HandOff, Token: h.token, TTLLeftMs: h.ttlMs})
				return
			}
		}
		w.respond(r, wire.Response{Status: st})
		return
	}
	ws := w.pick(ks, rec, r.Owner, r.Token)
	if w.isRevoked(key, r.Owner, r.Token) {
		// The holder acknowledges a revocation: the key goes as after a
		// force-unlock (an involuntary end, EventRevoked to watchers).
		e := w.expiryOf(key, r.Owner, r.Token)
		w.propose(ks, &pending{req: r, lost: e, forced: true, grants: ws, cmd: command{op: opExpire, key: key, owner: r.Owner, token: r.Token, grants: w.grantsFor(ks, ws)}})
		return
	}
	rest := without(rec, r.Owner, r.Token)
	p := &pending{req: r, grants: ws, cmd: command{op: opRelease, key: key, owner: r.Owner, token: r.Token, grants: w.grantsFor(ks, ws)}}
	if !r.HandOff.IsZero() && rest == 0 && len(ks.waiters) == 0 && exclusive(rec.kind()) {
		// The local queue's hand-off: nobody waits here, so the key
		// goes on to the same client's next waiter in this command,
		// with a new token (grants are applied after the release).
		p.handOff = true
		p.cmd.grants = []grant{{owner: r.HandOff, kind: rec.kind(), ttlMs: w.ttl(r), value: r.Value, delayMs: lockDelayOf(r)}}
	}
	if w.g.svc.obs != nil {
		p.grantedAt, _ = w.g.sm.grantedAt(key, r.Owner, r.Token)
	}
	w.propose(ks, p)
}

func (w *worker) cancelWait(r *Request, key string, ks *keyState) {
	for _, q := range ks.waiters {
		if q.req.Owner == r.Owner && q.req.WaitID == r.WaitID {
			q.gone = true
		}
	}
	ks.waiters = w.dropWaiters(ks.waiters)
	resp := wire.Response{Status: wire.StatusSuccess}
	// If the grant won the race, say so: the owner holds the lock.
	if rec := w.g.sm.get(key); rec != nil {
		if i := rec.find(r.Owner); i >= 0 {
			resp.Token = rec.at(i).token
		}
	}
	w.respond(r, resp)
}

// dropWaiters removes the waiters marked gone from ws and from the
// by-connection index.
func (w *worker) dropWaiters(ws []*waiter) []*waiter {
	out := ws[:0]
	for _, q := range ws {
		if !q.gone {
			out = append(out, q)
		} else {
			w.unindex(q)
		}
	}
	clear(ws[len(out):])
	return out
}

// dropWatchers removes the watchers marked gone from ws and from the
// by-connection index.
func (w *worker) dropWatchers(ws []*watcher) []*watcher {
	out := ws[:0]
	for _, wt := range ws {
		if !wt.gone {
			out = append(out, wt)
		} else {
			w.unindexWatch(wt)
		}
	}
	clear(ws[len(out):])
	return out
}

func (w *worker) propose(ks *keyState, p *pending) {
	ks.busy = true
	p.term = w.term
	cmd := appendCommand(make([]byte, 0, p.cmd.sizeHint()), &p.cmd)
	w.g.px.Submit(cmd, func(res paxos.Result) {
		w.post(event{kind: evResult, pend: p, res: res})
	})
}

func statusOf(err error) wire.Status {
	switch {
	case errors.Is(err, paxos.ErrOutcomeUnknown):
		// The replica stopped with the command in flight: another master
		// may still choose it, so the client must not take it as undone.
		return wire.StatusTimeout
	case errors.Is(err, paxos.ErrOverloaded):
		return wire.StatusOverloaded
	case errors.Is(err, paxos.ErrNotMaster), errors.Is(err, paxos.ErrNotChosen), errors.Is(err, paxos.ErrStopped):
		return wire.StatusNoMaster
	case errors.Is(err, paxos.ErrTooLarge):
		return wire.StatusBadRequest
	}
	return wire.StatusError
}

// staleResult answers the requester of a proposal whose outcome arrives
// after the worker lost the mastership it was proposed under: the command
// may well have been chosen (the next master recovers it), so the answer
// is what it did. Its waiters were told NO_MASTER when mastership was
// lost; they re-send, and a reacquire keeps the token.
func (w *worker) staleResult(p *pending, res paxos.Result) {
	out, _ := res.Value.(*outcome)
	if res.Err != nil || out == nil {
		w.respond(p.req, wire.Response{Status: statusOf(res.Err), RetryAfterMs: 50})
		return
	}
	resp := wire.Response{Status: out.status, Token: out.token}
	if p.cmd.op == opAcquire && out.status == wire.StatusSuccess {
		resp.TTLLeftMs = p.cmd.ttlMs
	}
	if p.handOff && out.status == wire.StatusSuccess && len(out.grants) > 0 && out.grants[0] != 0 {
		resp.Holder, resp.Token, resp.TTLLeftMs = p.cmd.grants[0].owner, out.grants[0], p.cmd.grants[0].ttlMs
	}
	w.respond(p.req, resp)
}

func (w *worker) onResult(p *pending, res paxos.Result) {
	key := p.cmd.key
	ks := w.keys[key]
	if ks == nil || p.term != w.term {
		// Proposed under a mastership since lost: its key's state is
		// gone, or belongs to a new term (with a change of its own in
		// flight, which this result must not unblock).
		w.staleResult(p, res)
		return
	}
	ks.busy = false
	now := w.clock.Now()
	out, _ := res.Value.(*outcome)
	obs := w.g.svc.obs
	if res.Err != nil || out == nil {
		st := statusOf(res.Err)
		w.respond(p.req, wire.Response{Status: st, RetryAfterMs: 50})
		inDoubt := errors.Is(res.Err, paxos.ErrOutcomeUnknown)
		for _, q := range p.grants {
			if inDoubt {
				// The grant may still be chosen through the next
				// master, so a waiter whose deadline passed meanwhile
				// is not told it timed out (its client would not know
				// it held the key until the TTL ran out): it stays
				// queued, the replica's stop makes this node give up
				// mastership, and loseMastership tells it NO_MASTER, so
				// that it asks the next master, which knows.
				q.granting = false
				continue
			}
			w.ungrant(q)
		}
		ks.waiters = w.dropWaiters(ks.waiters)
		if p.cmd.op == opExpire && p.req == nil {
			// Not chosen (overload, a lost lease): the lock must still
			// go at its deadline, so propose the Expire again shortly.
			// (A revoked holder's release that failed is its client's to
			// retry: it got the error; the deadline still stands.)
			w.retryExpire(p.lost, now)
		}
	} else {
		name := p.cmd.key[len(splitNS(key))+1:]
		switch p.cmd.op {
		case opAcquire:
			resp := wire.Response{Status: out.status, Token: out.token}
			if out.status == wire.StatusSuccess {
				if obs != nil {
					obs.Count(StatGrant)
				}
				ttl := time.Duration(p.cmd.ttlMs) * time.Millisecond
				w.hold(out.stored(key), out.token, p.req.Owner, p.req.Sink, now.Add(ttl))
				resp.TTLLeftMs = p.cmd.ttlMs
				// A reacquire keeps its token and replaces its value:
				// watchers that saw the token hear of a new value.
				if p.valueChanged {
					w.notifyValue(ks, name, out.token, p.req.Owner, p.cmd.value)
				}
				w.notify(ks, name, wire.EventAcquired, out.token, p.req.Owner, p.cmd.value)
			}
			w.respond(p.req, resp)
		case opSetPermits:
			w.respond(p.req, wire.Response{Status: out.status, Permits: p.cmd.limit})
		case opDowngrade:
			resp := wire.Response{Status: out.status, Token: out.token}
			if out.status == wire.StatusSuccess {
				w.hold(key, out.token, p.req.Owner, p.req.Sink, now.Add(time.Duration(p.cmd.ttlMs)*time.Millisecond))
				resp.TTLLeftMs = p.cmd.ttlMs
			}
			w.respond(p.req, resp)
		case opRenew:
			resp := wire.Response{Status: out.status, Token: out.token}
			if out.status == wire.StatusSuccess {
				if obs != nil {
					obs.Count(StatRenewal)
				}
				ttl := time.Duration(p.cmd.ttlMs) * time.Millisecond
				if p.cmd.ttlMs == 0 {
					if rec := w.g.sm.get(key); rec != nil {
						if i := rec.find(p.req.Owner); i >= 0 {
							ttl = time.Duration(rec.at(i).ttlMs) * time.Millisecond
						}
					}
				}
				w.hold(key, out.token, p.req.Owner, p.req.Sink, now.Add(ttl))
				resp.TTLLeftMs = uint32(ttl / time.Millisecond)
				if p.valueChanged {
					w.notifyValue(ks, name, out.token, p.req.Owner, p.cmd.value)
				}
			}
			w.respond(p.req, resp)
		case opRelease, opExpire:
			// The hold's deadline went with its record (a failed Expire
			// found the hold gone already).
			if out.status == wire.StatusSuccess {
				ev := wire.EventReleased
				if p.cmd.op == opRelease || p.forced && p.req != nil {
					w.staled() // the released hold's entry
					if obs != nil {
						obs.Count(StatRelease)
						if p.grantedAt != 0 {
							obs.Released(time.Duration(w.mono(now) - p.grantedAt))
						}
					}
				}
				if p.cmd.op == opExpire {
					if obs != nil {
						obs.Count(StatExpiry)
					}
					ev = wire.EventExpired
					if p.forced {
						ev = wire.EventRevoked
					}
					if sink := w.holderSink(p.lost, p.lost.owner.Client); sink != nil {
						sink.Push(&wire.Lost{Key: name, Token: p.cmd.token, Owner: p.lost.owner, Event: ev})
					}
				}
				w.notify(ks, name, ev, p.cmd.token, wire.Owner{}, "")
			}
			resp := wire.Response{Status: out.status, Token: out.token}
			if p.forced {
				resp.Holder = p.cmd.owner
			}
			if p.handOff {
				w.settleHandOff(ks, key, name, p, out, now, &resp)
			}
			w.respond(p.req, resp)
			w.endRevocation(key, p.cmd.owner, p.cmd.token, wire.Response{Status: out.status, Token: p.cmd.token})
		}
		if !p.handOff {
			w.settleGrants(ks, key, name, p, out, now)
		}
	}
	w.delayResult(key, p, out, res.Err, now)
	w.resume(key, ks)
}

// resume goes on after a change of key ended: the requests that waited for
// it, in order, then the multi-acquires that wait to reserve it, then the
// key's waiters if it is free.
func (w *worker) resume(key string, ks *keyState) {
	for len(ks.deferred) > 0 && !ks.busy {
		r := ks.deferred[0]
		ks.deferred[0] = nil
		ks.deferred = ks.deferred[1:]
		w.undefer(key, r)
		w.onRequest(r)
		if w.keys[key] != ks {
			return
		}
	}
	for len(ks.multis) > 0 && !ks.busy {
		m := ks.multis[0]
		ks.multis[0] = nil
		ks.multis = ks.multis[1:]
		w.multiReserve(m)
		if w.keys[key] != ks {
			return
		}
	}
	if !ks.busy {
		w.grantWaiters(key, ks, w.g.sm.get(key))
	}
	w.tidy(key, ks)
}

func splitNS(full string) string {
	ns, _ := splitFull(full)
	return ns
}

// settleGrants pushes Granted to the waiters a command handed the key to.
func (w *worker) settleGrants(ks *keyState, key, name string, p *pending, out *outcome, now time.Time) {
	if len(p.grants) == 0 {
		return
	}
	for j, q := range p.grants {
		if j >= len(out.grants) || out.grants[j] == 0 {
			w.ungrant(q) // the state did not allow it; the waiter stays
			continue
		}
		q.granting = false
		tok := out.grants[j]
		q.gone = true
		if obs := w.g.svc.obs; obs != nil {
			obs.Count(StatGrant)
			if q.since != 0 {
				obs.Waited(time.Duration(w.mono(now) - q.since))
			}
		}
		ttl := time.Duration(p.cmd.grants[j].ttlMs) * time.Millisecond
		w.hold(out.stored(key), tok, q.req.Owner, q.req.Sink, now.Add(ttl))
		if q.req.Sink != nil {
			q.req.Sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: name, Status: wire.StatusSuccess, Token: tok, Owner: q.req.Owner, TTLMs: p.cmd.grants[j].ttlMs})
		}
		w.notify(ks, name, wire.EventAcquired, tok, q.req.Owner, p.cmd.grants[j].value)
	}
	ks.waiters = w.dropWaiters(ks.waiters)
}

// settleHandOff completes a release that handed the key on (see
// Request.HandOff): the new hold's deadline, the watchers' event and the
// answer's Holder, Token and TTLLeftMs.
func (w *worker) settleHandOff(ks *keyState, key, name string, p *pending, out *outcome, now time.Time, resp *wire.Response) {
	if out.status != wire.StatusSuccess || len(out.grants) == 0 || out.grants[0] == 0 {
		return
	}
	g := p.cmd.grants[0]
	tok := out.grants[0]
	if obs := w.g.svc.obs; obs != nil {
		obs.Count(StatGrant)
	}
	w.hold(out.stored(key), tok, g.owner, p.req.Sink, now.Add(time.Duration(g.ttlMs)*time.Millisecond))
	w.notify(ks, name, wire.EventAcquired, tok, g.owner, g.value)
	resp.Holder, resp.Token, resp.TTLLeftMs = g.owner, tok, g.ttlMs
}

// hold records a hold's deadline on the master's clock: in its record,
// and as an entry of the expiry heap that says whom to tell.
func (w *worker) hold(key string, token uint64, o wire.Owner, sink Sink, at time.Time) {
	ns := w.mono(at)
	if prev, ok := w.g.sm.setDeadline(key, o, token, ns); ok {
		if prev != 0 {
			w.staled() // the entry of the deadline it had
		}
		w.expiry.push(expiry{at: ns, key: key, token: token, owner: o, sink: w.ref(sink)})
	}
}

// staled counts an expiry entry that no longer names a current deadline
// (its hold was renewed or released before it came up). When they are
// more than half the heap, the heap is rebuilt without them: a released
// lock's entry would otherwise stay until its TTL passes, and long TTLs
// with churn would fill the heap with dead entries.
func (w *worker) staled() {
	w.stale++
	if n := len(w.expiry); n >= 1024 && w.stale > n/2 {
		w.stale = 0
		w.expiry = w.g.sm.liveDeadlines(w.idx, w.expiry)
		w.expiry.init()
		if n := len(w.expiry); cap(w.expiry) > 4*n {
			w.expiry = append(expiryHeap(nil), w.expiry...)
		}
	}
}

func (w *worker) watch(r *Request, key string) {
	if !w.admit(useWatch, r) {
		return
	}
	ks := w.state(key)
	wt := &watcher{id: r.WatchID, key: key, sink: r.Sink, token: r.Token, continuous: r.Flags.Has(wire.FlagContinuous)}
	w.respond(r, wire.Response{Status: wire.StatusSuccess})
	// Already past the watcher's token: tell it at once.
	rec := w.g.sm.get(key)
	var cur uint64
	var holder wire.Owner
	var value string
	for i := range rec.n() {
		if h := rec.at(i); h.token > cur {
			cur, holder, value = h.token, h.owner, rec.value(i)
		}
	}
	switch {
	case cur > r.Token:
		r.Sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: r.Key, Event: wire.EventAcquired, Token: cur, Holder: holder, Value: value})
		if !wt.continuous {
			w.g.svc.use.give(useWatch, r.Sink, r.Namespace) // ended at once: not set
			return
		}
		wt.token = cur
	case r.Token != 0 && cur < r.Token:
		// The lock the watcher knew of is gone.
		r.Sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: r.Key, Event: wire.EventReleased, Token: r.Token})
		if !wt.continuous {
			w.g.svc.use.give(useWatch, r.Sink, r.Namespace)
			return
		}
	}
	if r.MaxWait > 0 {
		wt.deadline = w.clock.Now().Add(r.MaxWait)
		w.schedule(timerEntry{at: wt.deadline, kind: tWatch, key: key, wt: wt})
	}
	ks.watchers = append(ks.watchers, wt)
	w.indexWatch(wt)
}

// notifyValue tells the watchers that have seen the hold with token that
// its holder changed its value: EventAcquired again with the same token.
func (w *worker) notifyValue(ks *keyState, name string, token uint64, holder wire.Owner, value string) {
	for _, wt := range ks.watchers {
		if wt.token != token {
			continue
		}
		wt.sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: name, Event: wire.EventAcquired, Token: token, Holder: holder, Value: value})
		if !wt.continuous {
			wt.gone = true
		}
	}
	ks.watchers = w.dropWatchers(ks.watchers)
}

// notify tells the key's watchers about a change.
func (w *worker) notify(ks *keyState, name string, ev wire.Event, token uint64, holder wire.Owner, value string) {
	if len(ks.watchers) == 0 {
		return
	}
	for _, wt := range ks.watchers {
		if ev == wire.EventAcquired && token <= wt.token {
			continue
		}
		wt.sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: name, Event: ev, Token: token, Holder: holder, Value: value})
		if !wt.continuous {
			wt.gone = true
		} else if token > wt.token {
			wt.token = token
		}
	}
	ks.watchers = w.dropWatchers(ks.watchers)
}

// forget drops the waiters of client over sink and every watch over sink,
// and stops telling sink about its holds (its connection closed). The
// by-connection indexes make it cost what that connection had.
func (w *worker) forget(client uint64, sink Sink) {
	if r := w.refs[sink]; r != nil {
		r.sink = nil
		delete(w.refs, sink)
	}
	var keys []string
	for q := range w.waits[sink] {
		if q.req.Owner.Client == client && !q.granting {
			q.gone = true
			keys = append(keys, q.key)
		}
	}
	for wt := range w.watching[sink] {
		wt.gone = true
		keys = append(keys, wt.key)
	}
	// Requests parked behind a change in flight or held for the election's
	// end: dropped, so that they do not become waiters or holds of a
	// client that is gone.
	if len(w.early) > 0 {
		out := w.early[:0]
		for _, r := range w.early {
			if r.Sink == sink && r.Owner.Client == client {
				w.respond(r, wire.Response{Status: wire.StatusError, Msg: "client forgotten"})
				continue
			}
			out = append(out, r)
		}
		clear(w.early[len(out):])
		w.early = out
	}
	for key := range w.defers[sink] {
		ks := w.keys[key]
		if ks == nil {
			continue
		}
		out := ks.deferred[:0]
		for _, r := range ks.deferred {
			if r.Sink == sink && r.Owner.Client == client {
				w.undefer(key, r)
				w.respond(r, wire.Response{Status: wire.StatusError, Msg: "client forgotten"})
				continue
			}
			out = append(out, r)
		}
		clear(ks.deferred[len(out):])
		ks.deferred = out
		keys = append(keys, key)
	}
	for _, key := range keys {
		ks := w.keys[key]
		if ks == nil {
			continue
		}
		ks.waiters = w.dropWaiters(ks.waiters)
		ks.watchers = w.dropWatchers(ks.watchers)
		w.tidy(key, ks)
	}
}

// revoke tells sink that client's waits over it failed (AUTH_FAILED) and
// that the holds it is told about are revoked, then forgets the client
// over sink. The holds are found in the expiry heap, whose entries name
// the connection to tell: a scan of the heap, which is fine for what
// revocation is (an operator removing a namespace or changing a secret).
func (w *worker) revoke(client uint64, sink Sink) {
	for q := range w.waits[sink] {
		if q.req.Owner.Client == client && !q.granting {
			sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: q.req.Key, Status: wire.StatusAuthFailed, Owner: q.req.Owner})
		}
	}
	if ref := w.refs[sink]; ref != nil {
		for _, e := range w.expiry {
			if e.sink != ref {
				continue
			}
			if at, ok := w.g.sm.deadline(e.key, e.owner, e.token); ok && at == e.at {
				_, name := splitFull(e.key)
				sink.Push(&wire.Lost{Key: name, Token: e.token, Owner: e.owner, Event: wire.EventRevoked})
			}
		}
	}
	w.forget(client, sink)
}

// becomeMaster gives every held lock a full TTL from now: the old master
// may have extended it just before it lost its lease.
func (w *worker) becomeMaster() {
	w.serving = true
	w.term++
	now := w.mono(w.clock.Now())
	w.expiry, w.stale = w.expiry[:0], 0
	w.g.sm.forEachMut(w.idx, func(key string, l *lockRec) {
		for i := range l.n() {
			h := l.at(i)
			h.deadline = now + int64(time.Duration(h.ttlMs)*time.Millisecond)
			h.age = encodeHeld(time.Duration(h.ttlMs) * time.Millisecond) // held since now, as far as this master knows
			w.expiry = append(w.expiry, expiry{at: h.deadline, key: key, token: h.token, owner: h.owner})
		}
	})
	w.expiry.init()
}

// earlyLimit bounds how long a request waits for its group's
// master-elect to serve (see worker.early): far above the usual catch-up
// of a millisecond or two, well below the client's 3 s attempt timeout. A
// master-elect that takes longer (a quorum lost just after the election)
// answers NO_MASTER, and the clients back off as before.
const earlyLimit = time.Second

// maxEarly bounds worker.early; requests beyond it are answered NO_MASTER.
const maxEarly = 4096

// holdEarly keeps r for the end of the election when this node is the
// group's master-elect: it won the election and does not serve yet. It
// reports whether it kept r.
func (w *worker) holdEarly(r *Request) bool {
	if len(w.early) >= maxEarly || !w.g.Elected() {
		return false
	}
	if len(w.early) == 0 {
		w.earlyUntil = w.clock.Now().Add(earlyLimit)
	}
	w.early = append(w.early, r)
	return true
}

// releaseEarly decides the held requests once this node serves, and
// refuses them once it is no longer the master-elect (another node won,
// or it stepped down); otherwise they keep waiting.
func (w *worker) releaseEarly() {
	switch {
	case len(w.early) == 0:
	case w.serving:
		early := w.early
		w.early = nil
		for _, r := range early {
			w.onRequest(r)
		}
	case !w.g.Elected() && !w.g.Serving():
		w.refuseEarly() // another node won, or this one stepped down
	}
}

// refuseEarly answers every held request NO_MASTER.
func (w *worker) refuseEarly() {
	early := w.early
	w.early = nil
	for _, r := range early {
		w.respond(r, noMaster)
	}
}

// loseMastership drops what only a master keeps. Waiters are told
// NO_MASTER so that their clients re-send to the new master; in-flight
// requests are answered when their proposal's outcome arrives (see
// staleResult).
func (w *worker) loseMastership() {
	w.serving = false
	w.term++
	w.dropRevocations()
	var multis []*multiAcq
	for _, ks := range w.keys {
		for _, r := range ks.deferred {
			w.respond(r, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50})
		}
		multis = append(multis, ks.multis...)
		for _, q := range ks.waiters {
			if q.req.Sink != nil {
				q.req.Sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: q.req.Key, Status: wire.StatusNoMaster, Owner: q.req.Owner})
			}
		}
	}
	w.giveUsage()
	clear(w.keys)
	clear(w.refs)
	clear(w.waits)
	clear(w.watching)
	w.nwait.Store(0)
	w.nwatch.Store(0)
	clear(w.defers)
	w.timers = nil
	w.expiry = nil // the records' deadlines are reset when mastership returns
	w.stale = 0
	for _, m := range multis {
		w.multiFail(m, noMaster)
	}
}

func (w *worker) schedule(e timerEntry) {
	heap.Push(&w.timers, e)
}

// armTimer makes sure a wake-up is scheduled for the earliest deadline.
func (w *worker) armTimer() {
	var at time.Time
	earliest := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if len(w.timers) > 0 {
		earliest(w.timers[0].at)
	}
	if len(w.expiry) > 0 {
		earliest(w.timeOf(w.expiry[0].at))
	}
	if len(w.early) > 0 {
		earliest(w.earlyUntil)
	}
	if at.IsZero() {
		return
	}
	if w.timer != nil && !w.timerAt.After(at) {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	d := at.Sub(w.clock.Now())
	w.timerAt = at
	w.timer = w.clock.AfterFunc(max(d, 0), func() { w.post(event{kind: evTimer}) })
}

// fireTimers handles every deadline that passed, in time order.
func (w *worker) fireTimers() {
	w.timer = nil
	now := w.clock.Now()
	nowNs := w.mono(now)
	if len(w.early) > 0 && !now.Before(w.earlyUntil) {
		w.refuseEarly() // elected but still not serving: let the clients back off
	}
	for {
		waitDue := len(w.timers) > 0 && !w.timers[0].at.After(now)
		expDue := len(w.expiry) > 0 && w.expiry[0].at <= nowNs
		if expDue && (!waitDue || w.expiry[0].at <= w.mono(w.timers[0].at)) {
			w.expire(w.expiry.pop(), now)
			continue
		}
		if !waitDue {
			return
		}
		e := heap.Pop(&w.timers).(timerEntry)
		if e.kind == tDelay {
			w.delayDue(e.key, now)
			continue
		}
		ks := w.keys[e.key]
		if ks == nil {
			continue
		}
		switch e.kind {
		case tWait:
			if e.w.gone {
				continue
			}
			if e.w.granting {
				// Decided when the grant's outcome arrives (ungrant).
				e.w.overdue = true
				continue
			}
			w.timeOut(e.w)
			ks.waiters = w.dropWaiters(ks.waiters)
		case tWatch:
			if e.wt.gone {
				continue
			}
			e.wt.gone = true
			ks.watchers = w.dropWatchers(ks.watchers)
			_, name := splitFull(e.key)
			e.wt.sink.Push(&wire.WatchEvent{WatchID: e.wt.id, Key: name, Event: wire.EventTimeout})
		}
		w.tidy(e.key, ks)
	}
}

// timeOut tells waiter q its MaxWait passed and marks it gone (the caller
// drops it from its key's queue).
func (w *worker) timeOut(q *waiter) {
	q.gone = true
	if q.req.Sink != nil {
		q.req.Sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: q.req.Key, Status: wire.StatusTimeout, Owner: q.req.Owner})
	}
}

// ungrant ends q's part in a command that did not grant it the key: it
// waits on, unless its deadline passed meanwhile (fireTimers left it
// then), in which case it times out now. The caller drops gone waiters.
func (w *worker) ungrant(q *waiter) {
	q.granting = false
	if q.overdue && !q.gone {
		w.timeOut(q)
	}
}

// expire proposes the Expire of the hold whose deadline e passed, unless
// the hold was renewed or ended meanwhile.
func (w *worker) expire(e expiry, now time.Time) {
	dl, ok := w.g.sm.deadline(e.key, e.owner, e.token)
	if !ok || dl != e.at {
		return // renewed or gone
	}
	ks := w.state(e.key)
	defer w.tidy(e.key, ks)
	if ks.busy {
		// A change is in flight; look again shortly.
		w.retryExpire(e, now)
		return
	}
	var ws []*waiter
	if len(ks.waiters) > 0 {
		rec := w.g.sm.get(e.key)
		ws = w.pick(ks, rec, e.owner, e.token)
	}
	forced := w.isRevoked(e.key, e.owner, e.token)
	w.propose(ks, &pending{lost: e, forced: forced, grants: ws, cmd: command{op: opExpire, key: e.key, owner: e.owner, token: e.token, grants: w.grantsFor(ks, ws)}})
}

// retryExpire moves the deadline of e's hold a little past now, so that
// its Expire is proposed again.
func (w *worker) retryExpire(e expiry, now time.Time) {
	e.at = w.mono(now.Add(10 * time.Millisecond))
	if _, ok := w.g.sm.setDeadline(e.key, e.owner, e.token, e.at); ok {
		w.expiry.push(e)
	}
}
