package group

import (
	"sync"

	"github.com/paxlock/paxlock/client/wire"
)

// An operator's force-unlock revokes a hold; it does not free the key at
// once. The key stays held until the holder has stopped believing it
// holds it: it acknowledges the revocation by releasing the token (the
// client does so when it hears Lost EventRevoked, or REVOKED in answer to
// a renewal), or the hold's deadline passes, which the holder's own clock
// reaches first (its validity never outlasts the master's deadline).
// Meanwhile the master refuses the hold's renewals (REVOKED), reports its
// token not current, and grants the key to nobody, so no other owner is
// granted it while the revoked holder could still think it holds it. The
// revocation is replicated (opRevoke; see revoke_state.go), so a new
// master keeps it; the operators' requests waiting for its end are the
// master's alone, and an operator's request told NO_MASTER is sent again
// to the new master (paxlockctl does), which waits with it.

// holdID names a hold in a worker's key space: readers granted in one
// command share a token, so the owner is part of it.
type holdID struct {
	key   string
	owner wire.Owner
	token uint64
}

// revocations are a worker's revoked holds that have not ended, each with
// the operators' requests to answer when it does. An entry is made when
// the force-unlock is decided, before its opRevoke is applied.
type revocations map[holdID][]*Request

// forceRelease revokes key's first hold with a token up to r.Token,
// whoever holds it, and answers r once the hold has ended (see above);
// LOCK_DELETED if no such hold remains. The revocation is proposed
// (opRevoke) unless a previous master's is in the table already; its
// holder is told EventRevoked through the connection its deadline names,
// or any connection of its client to this node.
func (w *worker) forceRelease(r *Request, key string, ks *keyState) {
	var h holder // the hold revoked, a copy
	found := false
	w.g.sm.view(key, func(rec *lockRec) {
		for i := range rec.n() {
			if rec.at(i).token <= r.Token {
				h, found = *rec.at(i), true
				return
			}
		}
	})
	if !found {
		w.respond(r, wire.Response{Status: wire.StatusLockDeleted})
		return
	}
	id := holdID{key: key, owner: h.owner, token: h.token}
	if reqs, ok := w.revoked[id]; ok {
		w.revoked[id] = append(reqs, r)
		return
	}
	if w.revoked == nil {
		w.revoked = make(revocations)
	}
	w.revoked[id] = []*Request{r}
	if w.g.sm.revokedHold(key, h.owner, h.token) {
		w.tellRevoked(key, h.owner, h.token) // revoked under a previous master
		return
	}
	w.propose(ks, &pending{cmd: command{op: opRevoke, key: key, owner: h.owner, token: h.token}})
}

// revokeResult settles an opRevoke: once applied, the holder is told;
// otherwise the operators waiting on it get the failure (NO_MASTER and
// the like: they send it again) and the revocation is forgotten here.
func (w *worker) revokeResult(p *pending, out *outcome, err error) {
	c := &p.cmd
	switch {
	case err != nil || out == nil:
		w.endRevocation(c.key, c.owner, c.token, wire.Response{Status: statusOf(err), RetryAfterMs: 50})
	case out.status == wire.StatusSuccess:
		w.tellRevoked(c.key, c.owner, c.token)
	default:
		// The hold ended meanwhile (a key's changes are serialised,
		// so this does not happen): nothing is left to revoke.
		w.endRevocation(c.key, c.owner, c.token, wire.Response{Status: wire.StatusLockDeleted})
	}
}

// tellRevoked pushes Lost EventRevoked to the holder of the hold (key, o,
// token), if this node has a connection to tell.
func (w *worker) tellRevoked(key string, o wire.Owner, token uint64) {
	_, name := splitFull(key)
	if sink := w.holderSink(w.expiryOf(key, o, token), o.Client); sink != nil {
		sink.Push(&wire.Lost{Key: name, Token: token, Owner: o, Event: wire.EventRevoked})
	}
}

// tellAllRevoked tells the holders of the worker's revoked holds, as a
// new master: a revocation it inherits may not have reached its holder.
func (w *worker) tellAllRevoked() {
	w.g.sm.forEachRevoked(w.idx, func(key string, m revMark) {
		if sink := w.clients.sink(m.owner.Client); sink != nil {
			_, name := splitFull(key)
			sink.Push(&wire.Lost{Key: name, Token: m.token, Owner: m.owner, Event: wire.EventRevoked})
		}
	})
}

// expiryOf returns the hold (key, o, token) as an expiry: its current
// deadline and whom to tell; the entry with no sink if it has none.
func (w *worker) expiryOf(key string, o wire.Owner, token uint64) expiry {
	e := expiry{key: key, token: token, owner: o}
	if at, ok := w.deadline(key, o, token); ok && at != 0 {
		e.at, e.sink = at, w.times.connOf(&w.times.slots[w.times.find(key, o, token)])
	}
	return e
}

// holderSink is the connection to tell about a hold whose expiry entry is
// e: the one its grant or last renewal came over, or else (the hold was
// granted under another master, or that connection closed) a connection
// of its client to this node; nil if it has none.
func (w *worker) holderSink(e expiry, client uint64) Sink {
	if e.sink != nil && e.sink.sink != nil {
		return e.sink.sink
	}
	return w.clients.sink(client)
}

// isRevoked reports whether the hold (key, o, token) is revoked: by a
// force-unlock decided here, or in the table (a previous master's).
func (w *worker) isRevoked(key string, o wire.Owner, token uint64) bool {
	if len(w.revoked) > 0 {
		if _, ok := w.revoked[holdID{key: key, owner: o, token: token}]; ok {
			return true
		}
	}
	return w.g.sm.revokedHold(key, o, token)
}

// endRevocation answers the operators waiting on the revoked hold
// (key, o, token), which has just ended, with resp.
func (w *worker) endRevocation(key string, o wire.Owner, token uint64, resp wire.Response) {
	id := holdID{key: key, owner: o, token: token}
	reqs, ok := w.revoked[id]
	if !ok {
		return
	}
	delete(w.revoked, id)
	resp.Holder = o
	for _, r := range reqs {
		w.respond(r, resp)
	}
}

// dropRevocations answers every waiting operator NO_MASTER (this node
// stopped serving; the request goes to the next master) and forgets
// them; the revocations themselves are in the table, for the next master.
func (w *worker) dropRevocations() {
	for _, reqs := range w.revoked {
		for _, r := range reqs {
			w.respond(r, noMaster)
		}
	}
	clear(w.revoked)
}

// clientSinks is this node's authenticated connections by client id: how
// a master reaches the holder of a lock granted under another master,
// whose deadline entry names no connection, to tell it the lock was
// revoked or expired.
type clientSinks struct {
	mu sync.Mutex
	m  map[uint64][]Sink
}

// add records sink as a connection of client id.
func (c *clientSinks) add(id uint64, sink Sink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[uint64][]Sink)
	}
	for _, s := range c.m[id] {
		if s == sink {
			return
		}
	}
	c.m[id] = append(c.m[id], sink)
}

// remove forgets sink as a connection of client id.
func (c *clientSinks) remove(id uint64, sink Sink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss := c.m[id]
	for i, s := range ss {
		if s == sink {
			ss = append(ss[:i], ss[i+1:]...)
			break
		}
	}
	if len(ss) == 0 {
		delete(c.m, id)
	} else {
		c.m[id] = ss
	}
}

// sink returns the most recent open connection of client id, or nil.
func (c *clientSinks) sink(id uint64) Sink {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss := c.m[id]
	for i := len(ss) - 1; i >= 0; i-- {
		if !closedSink(ss[i]) {
			return ss[i]
		}
	}
	return nil
}

// AttachClient records sink, a connection whose handshake proved client
// id, so that the masters on this node can tell the client about holds
// whose own connection they do not know (granted under another master).
// The workers that have revoked holds in their table tell the client of
// its own over sink at once: a revocation decided while the holder had no
// connection to this node (the master changed since the grant) reaches
// the holder when it connects, not only when its TTL runs out.
// ForgetClient undoes it.
func (s *Service) AttachClient(id uint64, sink Sink) {
	s.clients.add(id, sink)
	for _, g := range s.groups {
		for _, w := range g.workers {
			if g.sm.hasRevoked(w.idx) {
				w.post(event{kind: evAttach, client: id, sink: sink})
			}
		}
	}
}

// tellClientRevoked pushes Lost EventRevoked over sink for each revoked
// hold of client in the worker's table, if the worker is serving.
func (w *worker) tellClientRevoked(client uint64, sink Sink) {
	if !w.serving || closedSink(sink) {
		return
	}
	w.g.sm.forEachRevoked(w.idx, func(key string, m revMark) {
		if m.owner.Client == client {
			_, name := splitFull(key)
			sink.Push(&wire.Lost{Key: name, Token: m.token, Owner: m.owner, Event: wire.EventRevoked})
		}
	})
}
