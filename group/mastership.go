package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// becomeMaster gives every held lock a full TTL from now: the old master
// may have extended it just before it lost its lease. The holders of
// revoked holds are told again (the revocation is in the table).
func (w *worker) becomeMaster() {
	w.serving = true
	w.term++
	now := w.mono(w.clock.Now())
	w.times.reset()
	w.g.sm.forEach(w.idx, func(key string, l *lockRec) {
		for i := range l.n() {
			h := l.at(i)
			ttl := time.Duration(h.ttlMs) * time.Millisecond
			// Held since now, as far as this master knows: a full
			// TTL, and a full maximum hold time (see maxhold.go).
			s := w.times.add(key, l.gen, h.owner, h.token)
			w.times.slots[s].start = now
			w.times.slots[s].bound = holdBound(ttl, time.Duration(l.maxHoldAt(i))*time.Millisecond)
			w.times.setAt(s, capDeadline(&w.times.slots[s], now+int64(ttl)))
		}
	})
	w.tellAllRevoked()
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
// NO_MASTER so that their clients re-send to the new master, and watchers
// EventMoved so that theirs register again there; in-flight
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
	for _, m := range w.watching {
		for wt := range m {
			tellMoved(wt)
		}
	}
	w.movePrefix("", true)
	w.giveUsage()
	clear(w.keys)
	clear(w.refs)
	clear(w.waits)
	clear(w.watching)
	w.nwait.Store(0)
	w.nwatch.Store(0)
	clear(w.defers)
	w.timers = nil
	w.times.reset() // set anew when mastership returns
	for _, m := range multis {
		w.multiFail(m, noMaster)
	}
}
