package group

import "github.com/paxlock/paxlock/client/wire"

// sinkRef is the connection a hold's Lost goes to. Every hold taken over
// one connection names the same sinkRef, so forgetting the connection
// is one store, however many locks it holds. While holds name it, it has
// a number in its worker's holdTimes (id, -1 when none), which the holds'
// slots keep in place of a pointer; holds counts them.
type sinkRef struct {
	sink  Sink
	id    int32
	holds int32
}

// closer is implemented by a Sink that can tell its connection closed for
// good (the server's connections do).
type closer interface{ Closed() bool }

// closedSink reports whether sink's connection closed for good.
func closedSink(sink Sink) bool {
	c, ok := sink.(closer)
	return ok && c.Closed()
}

// ref returns the sinkRef of sink (nil for none, or for a connection that
// closed: forget has run or will run for it, and a ref made now would
// never be forgotten).
func (w *worker) ref(sink Sink) *sinkRef {
	if sink == nil || closedSink(sink) {
		return nil
	}
	r := w.refs[sink]
	if r == nil {
		r = &sinkRef{sink: sink, id: -1}
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
			w.use.give(useWait, q.req.Sink, q.req.Namespace)
		}
		delete(m, q)
		if len(m) == 0 {
			delete(w.waits, q.req.Sink)
		}
	}
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
	w.forgetPrefix(sink)
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
// that its holds in namespace ns are revoked, then forgets the client
// over sink. The holds are found in the worker's holdTimes: those whose entry
// names sink, and those of client in ns whose entry names no open
// connection (see Service.RevokeClient). A scan of the slots, which is fine
// for what revocation is (an operator removing a namespace or changing a
// secret).
func (w *worker) revoke(client uint64, ns string, sink Sink) {
	for q := range w.waits[sink] {
		if q.req.Owner.Client == client && !q.granting {
			sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: q.req.Key, Status: wire.StatusAuthFailed, Owner: q.req.Owner})
		}
	}
	ref := w.refs[sink]
	w.times.each(func(e *holdSlot, key string) {
		to := w.times.connOf(e)
		mine := ref != nil && to == ref
		orphan := e.owner.Client == client && splitNS(key) == ns &&
			(to == nil || to.sink == nil || closedSink(to.sink))
		if e.pos >= 0 && (mine || orphan) && w.isCurrent(e, key) {
			_, name := splitFull(key)
			sink.Push(&wire.Lost{Key: name, Token: e.token, Owner: e.owner, Event: wire.EventRevoked})
		}
	})
	w.forget(client, sink)
}
