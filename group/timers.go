package group

import (
	"container/heap"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// mono converts a time on the worker's clock to nanoseconds since a second
// before the worker started (so > 0; 0 means unknown), the form stored in
// holdSlot.at and expiry.at.
func (w *worker) mono(t time.Time) int64 { return int64(t.Sub(w.base)) }

// timeOf is the inverse of mono.
func (w *worker) timeOf(ns int64) time.Time { return w.base.Add(time.Duration(ns)) }

// armDeadline records a hold's deadline on the master's clock, and whom
// to tell when it is lost, in the worker's holdTimes.
func (w *worker) armDeadline(key string, token uint64, o wire.Owner, sink Sink, at time.Time) {
	w.setDeadline(key, o, token, w.mono(at), w.ref(sink))
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
	if i := w.times.next(); i >= 0 {
		earliest(w.timeOf(w.times.slots[i].at))
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
		expAt := int64(0)
		if i := w.times.next(); i >= 0 {
			expAt = w.times.slots[i].at
		}
		expDue := expAt != 0 && expAt <= nowNs
		if expDue && (!waitDue || expAt <= w.mono(w.timers[0].at)) {
			w.expire(w.times.pop(), now)
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
		q.req.mark(StageGranted, wire.StatusTimeout, nil)
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
	dl, ok := w.deadline(e.key, e.owner, e.token)
	if !ok || dl != e.at {
		return // renewed or gone
	}
	if _, moving := w.g.sm.gateKey(e.key); moving {
		return // frozen: no expiry; the deadline is set again if it is served again
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
		w.g.sm.view(e.key, func(rec *lockRec) { ws = w.pick(ks, rec, e.owner, e.token) })
	}
	forced := w.isRevoked(e.key, e.owner, e.token)
	limited := !forced && w.pastLimit(e.key, e.owner, e.token, e.at)
	w.propose(ks, &pending{lost: e, forced: forced, holdLimit: limited, grants: ws, cmd: command{op: opExpire, key: e.key, owner: e.owner, token: e.token, grants: w.grantsFor(ks, ws)}})
}

// retryExpire moves the deadline of e's hold a little past now, so that
// its Expire is proposed again.
func (w *worker) retryExpire(e expiry, now time.Time) {
	w.retryDeadline(e.key, e.owner, e.token, w.mono(now.Add(10*time.Millisecond)), e.sink)
}
