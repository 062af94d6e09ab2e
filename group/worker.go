package group

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
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
