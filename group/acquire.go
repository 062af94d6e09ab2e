package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// waiter is a blocking acquire queued on its key (keyState.waiters).
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

// rankOf is the queue rank of r arriving at now: see waiter.rank. A
// re-sent wait (Request.WaitedMs, at most Config.MaxWaited) counts from
// when it first arrived at an earlier master, so a master change or a
// namespace move keeps the queue's weight-then-arrival order whatever
// order the waiters' clients re-send in.
func (w *worker) rankOf(now time.Time, r *Request) int64 {
	wt := r.Weight
	if wt == 0 {
		wt = wire.DefaultWeight
	}
	// The claim is bounded (Config.MaxWaited): beyond it a client could
	// rank ahead of every waiter.
	waited := min(time.Duration(r.WaitedMs)*time.Millisecond, w.cfg.MaxWaited)
	return w.mono(now) - int64(waited) - int64(wt)*int64(w.cfg.WeightAging)
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

// acquire decides an acquire (a downgrade and a permit change come as
// acquires too): it proposes the grant when the key's state, lock-delay
// and queue allow it, and otherwise hands the request to wait.
func (w *worker) acquire(r *Request, key string, ks *keyState) {
	if r.Flags.Has(wire.FlagDowngrade) {
		w.downgrade(r, key, ks)
		return
	}
	if r.Flags.Has(wire.FlagSetPermits) && r.Kind == wire.KindSemaphore {
		w.setPermits(r, key, ks)
		return
	}
	// What the decision reads of the record: its holds (n), a semaphore
	// total r does not match (limit, when sem), whether r can be granted
	// and is a reacquire (again: r.Owner's hold has token and value).
	var n int
	var ok, again, sem bool
	var limit uint32
	var token uint64
	var value string
	w.g.sm.view(key, func(rec *lockRec) {
		n, limit = rec.n(), rec.limit()
		sem = r.Kind == wire.KindSemaphore && semMismatch(r, rec)
		if ok, again = canGrantReq(rec, r); again {
			i := rec.find(r.Owner)
			token, value = rec.at(i).token, rec.value(i)
		}
	})
	if sem {
		w.refuseSemLimit(r, limit)
		return
	}
	if again && w.isRevoked(key, r.Owner, token) {
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
		if blockedByQueue(ks, r, w.rankOf(now, r)) {
			ok = false
		}
	}
	if ok && !again && !w.heldAdmits(r) {
		return // the namespace's held quota (its holders) is reached
	}
	if ok && !again && n >= w.cfg.MaxHoldersPerKey {
		if w.holdersFull(r) {
			return
		}
		ok = false // a blocking acquire waits for a holder to leave
	}
	if ok {
		p := &pending{req: r, cmd: command{op: opAcquire, key: key, owner: r.Owner, kind: r.Kind, ttlMs: w.ttl(r), value: r.Value, permits: r.Permits, limit: r.Limit, delayMs: lockDelayOf(r), maxHoldMs: maxHoldOf(r)}}
		if again {
			p.valueChanged = value != r.Value
		}
		w.propose(ks, p)
		return
	}
	w.wait(r, key, ks, n > 0, now, delayed)
}

// wait answers an acquire that cannot be granted now: a re-sent wait
// takes over its waiter, a try-lock (MaxWait 0) is LOCK_OCCUPIED (with
// what is left of a lock-delay, delayed), and a blocking acquire joins
// the key's queue in rank order. held is whether acquire found the key
// held; now is the time acquire read, or zero.
func (w *worker) wait(r *Request, key string, ks *keyState, held bool, now time.Time, delayed time.Duration) {
	// Re-sent by a client after a reconnect: the same wait, a new sink.
	if r.WaitID != 0 {
		for _, q := range ks.waiters {
			if q.req.Owner == r.Owner && q.req.WaitID == r.WaitID {
				w.unindex(q)
				q.req = r
				w.use.take(w.cfg, useWait, r.Sink, r.Namespace, false, 0)
				w.index(q)
				w.respond(r, wire.Response{Status: wire.StatusLockWait, QueueLen: uint32(len(ks.waiters))})
				return
			}
		}
	}
	if r.MaxWait == 0 {
		resp := wire.Response{Status: wire.StatusLockOccupied}
		w.g.sm.view(key, func(rec *lockRec) { w.occupiedInfo(&resp, key, ks, rec) })
		if delayed > 0 {
			resp.RetryAfterMs = uint32((delayed + time.Millisecond - 1) / time.Millisecond)
			resp.Msg = "lock-delay"
		}
		w.respond(r, resp)
		return
	}
	if len(ks.waiters) >= w.cfg.MaxWaiters {
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
	q := &waiter{req: r, key: key, seq: w.seq, rank: w.rankOf(now, r)}
	if w.obs != nil {
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
	r.mark(StageQueued, wire.StatusLockWait, nil)
	w.respond(r, wire.Response{Status: wire.StatusLockWait, QueueLen: uint32(len(ks.waiters))})
	// A free key with waiters (say, the head timed out at the wrong
	// moment) is handed on at once.
	if !held {
		w.grantWaiters(key, ks)
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
		gs[i] = grant{owner: q.req.Owner, kind: q.req.Kind, ttlMs: w.ttl(q.req), value: q.req.Value, permits: q.req.Permits, limit: q.req.Limit, delayMs: lockDelayOf(q.req), maxHoldMs: maxHoldOf(q.req)}
	}
	return gs
}

// grantWaiters hands a key that is free (or read-held) to its head
// waiters with one command.
func (w *worker) grantWaiters(key string, ks *keyState) {
	if ks.busy || w.delayHolds(key, ks) || len(ks.waiters) == 0 {
		return
	}
	var ws []*waiter
	w.g.sm.view(key, func(rec *lockRec) { ws = w.pick(ks, rec, wire.Owner{}, 0) })
	if len(ws) == 0 {
		return
	}
	// A grant-only command: release nothing, then grant.
	w.propose(ks, &pending{grants: ws, cmd: command{op: opGrant, key: key, grants: w.grantsFor(ks, ws)}})
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
	w.g.sm.view(key, func(rec *lockRec) {
		if i := rec.find(r.Owner); i >= 0 {
			resp.Token = rec.at(i).token
		}
	})
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
