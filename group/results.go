package group

import (
	"errors"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

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
	// holdLimit: the expire of a hold that reached its maximum hold
	// time (see maxhold.go); its holder and watchers hear
	// EventHoldLimit.
	holdLimit bool
	// passOn: a release whose cmd.grants[0] is req.PassOn, not a
	// queued waiter (see Request.PassOn).
	passOn bool
}

func (w *worker) propose(ks *keyState, p *pending) {
	ks.busy = true
	p.term = w.term
	cmd := appendCommand(make([]byte, 0, p.cmd.sizeHint()), &p.cmd)
	if p.traced() {
		p.markProposed()
	}
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
	if p.passOn && out.status == wire.StatusSuccess && len(out.grants) > 0 && out.grants[0] != 0 {
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
	if p.traced() {
		p.markCommitted(committedStatus(out, res.Err))
	}
	if res.Err != nil || out == nil {
		w.notApplied(ks, p, res.Err, now)
	} else {
		w.applied(ks, key, p, out, now)
	}
	w.delayResult(key, p, out, res.Err, now)
	w.resume(key, ks)
}

// notApplied settles a proposal that failed or whose outcome is unknown
// (err): the requester's error answer, its waiters back in the queue, and
// a master-decided Expire proposed again.
func (w *worker) notApplied(ks *keyState, p *pending, err error, now time.Time) {
	st := statusOf(err)
	w.respond(p.req, wire.Response{Status: st, RetryAfterMs: 50})
	inDoubt := errors.Is(err, paxos.ErrOutcomeUnknown)
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
	if p.cmd.op == opRevoke {
		w.revokeResult(p, nil, err)
	}
	if p.cmd.op == opExpire && p.req == nil {
		// Not chosen (overload, a lost lease): the lock must still
		// go at its deadline, so propose the Expire again shortly.
		// (A revoked holder's release that failed is its client's to
		// retry: it got the error; the deadline still stands.)
		w.retryExpire(p.lost, now)
	}
}

// applied settles a proposal that was chosen and applied with outcome
// out: the requester's answer, the hold's deadline, the watchers' events
// and the grants to waiters.
func (w *worker) applied(ks *keyState, key string, p *pending, out *outcome, now time.Time) {
	name := p.cmd.key[len(splitNS(key))+1:]
	switch p.cmd.op {
	case opAcquire:
		w.acquired(ks, key, name, p, out, now)
	case opSetPermits:
		w.respond(p.req, wire.Response{Status: out.status, Permits: p.cmd.limit})
	case opDowngrade:
		resp := wire.Response{Status: out.status, Token: out.token}
		if out.status == wire.StatusSuccess {
			w.armDeadline(key, out.token, p.req.Owner, p.req.Sink, now.Add(time.Duration(p.cmd.ttlMs)*time.Millisecond))
			resp.TTLLeftMs = p.cmd.ttlMs
		}
		w.respond(p.req, resp)
	case opRenew:
		w.renewed(ks, key, name, p, out, now)
	case opRelease, opExpire:
		if p.cmd.keep != 0 {
			w.releasedPart(ks, key, name, p, out)
			break
		}
		w.released(ks, key, name, p, out, now)
	case opRevoke:
		w.revokeResult(p, out, nil)
	}
	if !p.passOn {
		w.settleGrants(ks, key, name, p, out, now)
	}
}

// acquired answers an applied acquire and, when it was granted, records
// the hold's deadline and tells the key's watchers.
func (w *worker) acquired(ks *keyState, key, name string, p *pending, out *outcome, now time.Time) {
	obs := w.obs
	resp := wire.Response{Status: out.status, Token: out.token}
	if out.status == wire.StatusSuccess {
		if obs != nil {
			obs.Count(StatGrant)
		}
		ttl := time.Duration(p.cmd.ttlMs) * time.Millisecond
		w.armDeadline(key, out.token, p.req.Owner, p.req.Sink, now.Add(ttl))
		resp.TTLLeftMs = p.cmd.ttlMs
		// A reacquire keeps its token and replaces its value:
		// watchers that saw the token hear of a new value.
		if p.valueChanged {
			w.notifyValue(ks, key, name, out.token, p.req.Owner, p.cmd.value)
		}
		w.notify(ks, key, name, wire.EventAcquired, out.token, p.req.Owner, p.cmd.value)
	}
	w.respond(p.req, resp)
}

// renewed answers an applied renew and, when it succeeded, moves the
// hold's deadline and tells the watchers of a changed value.
func (w *worker) renewed(ks *keyState, key, name string, p *pending, out *outcome, now time.Time) {
	obs := w.obs
	resp := wire.Response{Status: out.status, Token: out.token}
	if out.status == wire.StatusSuccess {
		if obs != nil {
			obs.Count(StatRenewal)
		}
		ttl := time.Duration(p.cmd.ttlMs) * time.Millisecond
		if p.cmd.ttlMs == 0 {
			w.g.sm.view(key, func(rec *lockRec) {
				if i := rec.find(p.req.Owner); i >= 0 {
					ttl = time.Duration(rec.at(i).ttlMs) * time.Millisecond
				}
			})
		}
		w.armDeadline(key, out.token, p.req.Owner, p.req.Sink, now.Add(ttl))
		resp.TTLLeftMs = uint32(ttl / time.Millisecond)
		if p.valueChanged {
			w.notifyValue(ks, key, name, out.token, p.req.Owner, p.cmd.value)
		}
	}
	w.respond(p.req, resp)
}

// released settles an applied release or expire: the metrics, the lost
// holder's Lost push, the watchers' event, a pass-on's new hold, the
// answer and the end of a revocation.
func (w *worker) released(ks *keyState, key, name string, p *pending, out *outcome, now time.Time) {
	obs := w.obs
	// A failed Expire found the hold gone already.
	if out.status == wire.StatusSuccess {
		w.dropDeadline(key, p.cmd.owner, p.cmd.token)
		ev := wire.EventReleased
		if p.cmd.op == opRelease || p.forced && p.req != nil {
			if obs != nil {
				obs.Count(StatRelease)
				if p.grantedAt != 0 {
					obs.Released(time.Duration(w.mono(now) - p.grantedAt))
				}
			}
		}
		if p.cmd.op == opExpire {
			if obs != nil && !p.holdLimit {
				obs.Count(StatExpiry)
			}
			ev = wire.EventExpired
			switch {
			case p.forced:
				ev = wire.EventRevoked
			case p.holdLimit:
				ev = wire.EventHoldLimit
				if obs != nil {
					obs.Count(StatHoldLimit)
				}
			}
			if sink := w.holderSink(p.lost, p.lost.owner.Client); sink != nil {
				sink.Push(&wire.Lost{Key: name, Token: p.cmd.token, Owner: p.lost.owner, Event: ev})
			}
		}
		w.notify(ks, key, name, ev, p.cmd.token, wire.Owner{}, "")
	}
	resp := wire.Response{Status: out.status, Token: out.token}
	if p.forced {
		resp.Holder = p.cmd.owner
	}
	if p.passOn {
		w.settlePassOn(ks, key, name, p, out, now, &resp)
	}
	w.respond(p.req, resp)
	w.endRevocation(key, p.cmd.owner, p.cmd.token, wire.Response{Status: out.status, Token: p.cmd.token})
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
		w.decide(r, false)
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
		w.grantWaiters(key, ks)
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
		if obs := w.obs; obs != nil {
			obs.Count(StatGrant)
			if q.since != 0 {
				obs.Waited(time.Duration(w.mono(now) - q.since))
			}
		}
		ttl := time.Duration(p.cmd.grants[j].ttlMs) * time.Millisecond
		w.armDeadline(key, tok, q.req.Owner, q.req.Sink, now.Add(ttl))
		if q.req.Sink != nil {
			q.req.Sink.Push(&wire.Granted{WaitID: q.req.WaitID, Key: name, Status: wire.StatusSuccess, Token: tok, Owner: q.req.Owner, TTLMs: p.cmd.grants[j].ttlMs})
		}
		q.req.mark(StageGranted, wire.StatusSuccess, traceOf(p.req))
		w.notify(ks, key, name, wire.EventAcquired, tok, q.req.Owner, p.cmd.grants[j].value)
	}
	ks.waiters = w.dropWaiters(ks.waiters)
}

// settlePassOn completes a release that handed the key on (see
// Request.PassOn): the new hold's deadline, the watchers' event and the
// answer's Holder, Token and TTLLeftMs.
func (w *worker) settlePassOn(ks *keyState, key, name string, p *pending, out *outcome, now time.Time, resp *wire.Response) {
	if out.status != wire.StatusSuccess || len(out.grants) == 0 || out.grants[0] == 0 {
		return
	}
	g := p.cmd.grants[0]
	tok := out.grants[0]
	if obs := w.obs; obs != nil {
		obs.Count(StatGrant)
	}
	w.armDeadline(key, tok, g.owner, p.req.Sink, now.Add(time.Duration(g.ttlMs)*time.Millisecond))
	w.notify(ks, key, name, wire.EventAcquired, tok, g.owner, g.value)
	resp.Holder, resp.Token, resp.TTLLeftMs = g.owner, tok, g.ttlMs
}
