package group

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/paxlock/paxlock/client/wire"
)

// prefixWatcher is a prefix watch set on a group's master: every change
// of a key of namespace ns that starts with prefix is pushed to sink as a
// WatchEvent with id.
type prefixWatcher struct {
	id     uint64
	ns     string
	prefix string
	sink   Sink
}

// prefixSet is a group's prefix watches by namespace. A published set is
// never changed (copy on write), so that workers read it without a lock.
type prefixSet map[string][]*prefixWatcher

// prefixWatches keeps a group's prefix watches apart from the per-key
// ones: a prefix spans every worker's shard, so the set is the group's,
// read by every worker on each change of a key (notifyPrefix) through one
// atomic load, and nil while the group has none, so that a change costs
// nothing more then. Registrations, unwatches and a closed connection's
// removal go through the group's first worker (Service.SubmitPrefix,
// forgetPrefix), which holds the lease while it registers; any worker
// that stops serving takes them all (movePrefix). Writers hold mu.
type prefixWatches struct {
	set atomic.Pointer[prefixSet]
	mu  sync.Mutex // orders the writers
}

// load returns the published set, nil when there is no prefix watch.
func (p *prefixWatches) load() prefixSet {
	if s := p.set.Load(); s != nil {
		return *s
	}
	return nil
}

// update publishes fn's copy of the set (nil or empty: none) and returns
// what fn removed. fn gets a fresh copy of the map it may change; the
// slices in it are shared and must be replaced, not changed in place.
func (p *prefixWatches) update(fn func(s prefixSet) []*prefixWatcher) []*prefixWatcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.load()
	s := make(prefixSet, len(old)+1)
	for ns, ws := range old {
		s[ns] = ws
	}
	gone := fn(s)
	for ns, ws := range s {
		if len(ws) == 0 {
			delete(s, ns)
		}
	}
	if len(s) == 0 {
		p.set.Store(nil)
	} else {
		p.set.Store(&s)
	}
	return gone
}

// prefixWithout returns ws less the watchers drop selects, as a new slice, and
// those it dropped.
func prefixWithout(ws []*prefixWatcher, drop func(*prefixWatcher) bool) (kept, gone []*prefixWatcher) {
	for _, pw := range ws {
		if drop(pw) {
			gone = append(gone, pw)
		} else {
			kept = append(kept, pw)
		}
	}
	return kept, gone
}

// SubmitPrefix passes a prefix watch or unwatch (r.Flags holds
// wire.FlagPrefix; r.Key is the prefix) to the master of group g, which
// answers it as Submit's requests are answered; a group out of range is
// answered BAD_REQUEST.
func (s *Service) SubmitPrefix(r *Request, g ID) {
	if g < 0 || int(g) >= len(s.groups) {
		if r.Sink != nil {
			r.Sink.Respond(r.ReqID, wire.Response{Status: wire.StatusBadRequest, Msg: "prefix watch: no such group"})
		}
		return
	}
	s.groups[g].workers[0].submit(r)
}

// prefixRequest decides a prefix watch or unwatch on the group's first
// worker (see prefixWatches), which serves and holds the lease.
func (w *worker) prefixRequest(r *Request) {
	switch r.Op {
	case OpWatch:
		w.watchPrefix(r)
	case OpUnwatch:
		gone := w.g.prefix.update(func(s prefixSet) []*prefixWatcher {
			var gone []*prefixWatcher
			s[r.Namespace], gone = prefixWithout(s[r.Namespace], func(pw *prefixWatcher) bool { return pw.id == r.WatchID && pw.sink == r.Sink })
			return gone
		})
		w.givePrefix(gone)
		w.respond(r, wire.Response{Status: wire.StatusSuccess})
	default:
		w.respond(r, wire.Response{Status: wire.StatusBadRequest, Msg: "prefix: unknown operation"})
	}
}

// watchPrefix sets a prefix watch for r, within the bounds on prefix
// watches per connection and per namespace (Config.MaxConnPrefixWatches
// and MaxNamespacePrefixWatches); beyond one it answers OVERLOADED. A
// watch registered again (the same connection and id) replaces the one
// set before and takes no new place.
func (w *worker) watchPrefix(r *Request) {
	pw := &prefixWatcher{id: r.WatchID, ns: r.Namespace, prefix: r.Key, sink: r.Sink}
	var refused string
	w.g.prefix.update(func(s prefixSet) []*prefixWatcher {
		ws, old := prefixWithout(s[pw.ns], func(o *prefixWatcher) bool { return o.id == pw.id && o.sink == pw.sink })
		if len(old) == 0 {
			if refused, _ = w.use.take(w.cfg, usePrefix, r.Sink, r.Namespace, true, 0); refused != "" {
				return nil
			}
		}
		s[pw.ns] = append(ws, pw)
		return nil
	})
	if refused != "" {
		w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: overloadRetryMs, Msg: refused})
		return
	}
	w.respond(r, wire.Response{Status: wire.StatusSuccess})
}

// givePrefix gives back the places of removed prefix watches.
func (w *worker) givePrefix(gone []*prefixWatcher) {
	for _, pw := range gone {
		w.use.give(usePrefix, pw.sink, pw.ns)
	}
}

// forgetPrefix drops the group's prefix watches over sink (its connection
// closed or its session was revoked: it is told nothing).
func (w *worker) forgetPrefix(sink Sink) {
	if w.idx != 0 || w.g.prefix.load() == nil {
		return
	}
	w.givePrefix(w.g.prefix.update(func(s prefixSet) []*prefixWatcher {
		var gone, g []*prefixWatcher
		for ns, ws := range s {
			s[ns], g = prefixWithout(ws, func(pw *prefixWatcher) bool { return pw.sink == sink })
			gone = append(gone, g...)
		}
		return gone
	}))
}

// movePrefix drops the group's prefix watches of namespace ns, or every
// one when all is set (the master stepped down), and pushes each
// EventMoved, so that its client registers it again where the group, or
// the namespace, is served next. Every worker calls it as it stops
// serving: whichever comes first takes the watches, once.
func (w *worker) movePrefix(ns string, all bool) {
	if w.g.prefix.load() == nil {
		return
	}
	gone := w.g.prefix.update(func(s prefixSet) []*prefixWatcher {
		var gone []*prefixWatcher
		for n, ws := range s {
			if all || n == ns {
				gone = append(gone, ws...)
				delete(s, n)
			}
		}
		return gone
	})
	for _, pw := range gone {
		if pw.sink != nil {
			pw.sink.Push(&wire.WatchEvent{WatchID: pw.id, Key: pw.prefix, Event: wire.EventMoved})
		}
	}
	w.givePrefix(gone)
}

// notifyPrefix pushes a change of key (full: namespace and name) to the
// group's prefix watches of its namespace whose prefix it has. It costs
// one atomic load while the group has no prefix watch, a map lookup while
// the key's namespace has none, and otherwise time in proportion to the
// namespace's prefix watches on the group.
func (w *worker) notifyPrefix(key string, ev wire.Event, token uint64, holder wire.Owner, value string) {
	set := w.g.prefix.load()
	if set == nil {
		return
	}
	ns, name := splitFull(key)
	for _, pw := range set[ns] {
		if strings.HasPrefix(name, pw.prefix) && pw.sink != nil {
			pw.sink.Push(&wire.WatchEvent{WatchID: pw.id, Key: name, Event: ev, Token: token, Holder: holder, Value: value})
		}
	}
}
