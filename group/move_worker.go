package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/systable"
)

// moveChanged tells every worker of the move states an Apply applied. It
// runs on the paxos host's loop, after the Apply, on every replica; a
// worker that does not serve the group has nothing to do.
func (g *Group) moveChanged(news []systable.MoveNews) {
	for _, n := range news {
		for _, w := range g.workers {
			w.post(event{kind: evMove, req: &Request{Namespace: n.NS}, n: int(n.State)})
		}
	}
}

// onMove follows namespace ns's move state st on the master.
//
// Incoming, frozen, dropped: the namespace's waiters get a Granted with
// the gate's status (MOVING, or MOVED), so that their clients send their
// acquires again — at the target once they have followed the namespace —
// as they do after a master change's NO_MASTER; requests parked behind a
// change in flight are answered the same; lock-delay timers stop. The
// expiry heap's entries stay: expire skips a gated namespace. Watches
// stay while the namespace is frozen (an aborted move keeps them) and go
// when it is dropped, each told EventMoved: its clients register them
// again where they follow the namespace, as after a master change.
//
// Owned, or served again (an abort's unfreeze): every hold of the
// namespace gets a full TTL from now, and every lock-delay its full
// length, as a new master gives them (becomeMaster): the deadlines of
// the cluster it came from, or of the freeze, are unknown here, and a
// later deadline never ends a hold before its holder stops believing in
// it (invariant I9).
func (w *worker) onMove(ns string, st MoveState) {
	if !w.serving {
		return
	}
	switch st {
	case MoveIncoming, MoveFrozen, MoveDropped:
		g, ok := w.g.sm.gateNS(ns)
		if !ok {
			return // served again since: a later news says so
		}
		w.stopNamespace(ns, g, st == MoveDropped)
	default:
		if _, gated := w.g.sm.gateNS(ns); gated {
			return // gated again since
		}
		w.serveNamespace(ns)
	}
}

// stopNamespace answers what the worker keeps of namespace ns with g's
// answer (see onMove); dropWatches also ends its watches.
func (w *worker) stopNamespace(ns string, g systable.Gate, dropWatches bool) {
	resp := gateResponse(g)
	for key, ks := range w.keys {
		if splitNS(key) != ns {
			continue
		}
		for _, r := range ks.deferred {
			w.undefer(key, r)
			w.respond(r, resp)
		}
		ks.deferred = nil
		for _, q := range ks.waiters {
			if q.req.Sink != nil {
				q.req.Sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: q.req.Key, Status: resp.Status, Owner: q.req.Owner})
			}
			q.gone = true
		}
		ks.waiters = w.dropWaiters(ks.waiters)
		if dropWatches {
			for _, wt := range ks.watchers {
				tellMoved(wt) // registered again where the client follows ns
				wt.gone = true
			}
			ks.watchers = w.dropWatchers(ks.watchers)
		}
		w.tidy(key, ks)
	}
	for key := range w.delays {
		if splitNS(key) == ns {
			delete(w.delays, key)
		}
	}
	if dropWatches {
		w.movePrefix(ns, false)
		w.dropNamespaceDeadlines(ns) // its records go
	}
}

// serveNamespace gives namespace ns's holds and lock-delays on the
// worker's shard their full length from now (see onMove).
func (w *worker) serveNamespace(ns string) {
	now := w.clock.Now()
	type hold struct {
		key   string
		owner wire.Owner
		token uint64
		ttl   time.Duration
	}
	var hs []hold
	w.g.sm.forEach(w.idx, func(key string, l *lockRec) {
		if splitNS(key) != ns {
			return
		}
		for i := range l.n() {
			h := l.at(i)
			hs = append(hs, hold{key, h.owner, h.token, time.Duration(h.ttlMs) * time.Millisecond})
		}
	})
	for _, h := range hs {
		w.armDeadline(h.key, h.token, h.owner, nil, now.Add(h.ttl))
	}
	var ds []importedDelay
	w.g.sm.forEachDelay(w.idx, func(key string, d delayRec) {
		if splitNS(key) == ns {
			ds = append(ds, importedDelay{key, d})
		}
	})
	for _, d := range ds {
		delete(w.delays, d.key)
		w.startDelay(d.key, d.d.ms, now)
	}
}
