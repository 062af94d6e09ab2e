package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// watcher is a watch set on its key (keyState.watchers).
type watcher struct {
	id         uint64
	key        string
	sink       Sink
	token      uint64
	continuous bool
	deadline   time.Time
	gone       bool
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
			w.use.give(useWatch, wt.sink, ns)
		}
		delete(m, wt)
		if len(m) == 0 {
			delete(w.watching, wt.sink)
		}
	}
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

// tellMoved pushes EventMoved to wt, whose watch this worker stops
// serving without a change of its key while its session goes on (a
// step-down, its namespace dropped here by a move): the client registers
// it again where the key is served, so that no watch is dropped without a
// word. A revoked session's watches get nothing: its connection closes,
// or carries another namespace's session, which must hear nothing of the
// old one's keys.
func tellMoved(wt *watcher) {
	if wt.sink == nil {
		return
	}
	_, name := splitFull(wt.key)
	wt.sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: name, Event: wire.EventMoved})
}

func (w *worker) watch(r *Request, key string) {
	if !w.admit(useWatch, r) {
		return
	}
	ks := w.state(key)
	wt := &watcher{id: r.WatchID, key: key, sink: r.Sink, token: r.Token, continuous: r.Flags.Has(wire.FlagContinuous)}
	w.respond(r, wire.Response{Status: wire.StatusSuccess})
	// Already past the watcher's token: tell it at once.
	var cur uint64
	var holder wire.Owner
	var value string
	w.g.sm.view(key, func(rec *lockRec) {
		for i := range rec.n() {
			if h := rec.at(i); h.token > cur {
				cur, holder, value = h.token, h.owner, rec.value(i)
			}
		}
	})
	switch {
	case cur > r.Token:
		r.Sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: r.Key, Event: wire.EventAcquired, Token: cur, Holder: holder, Value: value})
		if !wt.continuous {
			w.use.give(useWatch, r.Sink, r.Namespace) // ended at once: not set
			return
		}
		wt.token = cur
	case r.Token != 0 && cur < r.Token:
		// The lock the watcher knew of is gone.
		r.Sink.Push(&wire.WatchEvent{WatchID: wt.id, Key: r.Key, Event: wire.EventReleased, Token: r.Token})
		if !wt.continuous {
			w.use.give(useWatch, r.Sink, r.Namespace)
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
// its holder changed its value: EventAcquired again with the same token;
// and so the prefix watches of key (full: namespace and name).
func (w *worker) notifyValue(ks *keyState, key, name string, token uint64, holder wire.Owner, value string) {
	w.notifyPrefix(key, wire.EventAcquired, token, holder, value)
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

// notify tells the key's watchers, and the prefix watches of key (full:
// namespace and name), about a change.
func (w *worker) notify(ks *keyState, key, name string, ev wire.Event, token uint64, holder wire.Owner, value string) {
	w.notifyPrefix(key, ev, token, holder, value)
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
