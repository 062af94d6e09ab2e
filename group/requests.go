package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

func (w *worker) ttl(r *Request) uint32 {
	cfg := w.cfg
	d := r.TTL
	if d <= 0 {
		d = cfg.DefaultTTL
	}
	d = min(max(d, cfg.MinTTL), cfg.MaxTTL)
	return uint32(d / time.Millisecond)
}

// onRequest decides a request reaching the master: from a client, or held
// while this node was master-elect (see holdEarly).
func (w *worker) onRequest(r *Request) { w.decide(r, true) }

// decide decides r; fresh says it was not decided before (a request
// deferred behind a change in flight was checked against its namespace's
// rate quota when it arrived).
func (w *worker) decide(r *Request, fresh bool) {
	// The lease is checked on the monotonic clock for every request: a
	// master whose process was paused must not answer from its state.
	// The check and the answer are one step against a mastership
	// transfer (see Group.serve).
	w.g.serve.RLock()
	defer w.g.serve.RUnlock()
	if !w.serving || !w.g.leaseValid() {
		if !w.serving && w.holdEarly(r) {
			return
		}
		w.respond(r, noMaster)
		return
	}
	if g, ok := w.g.sm.gateNS(r.Namespace); ok && r.Op != OpUnwatch && r.Op != OpCancelWait {
		w.respond(r, gateResponse(g)) // moving or moved: see move.go
		return
	}
	if fresh && (r.Op == OpAcquire || r.Op == OpState || r.Op == OpWatch) && !w.rateAdmits(r) {
		return
	}
	if r.Flags.Has(wire.FlagPrefix) && (r.Op == OpWatch || r.Op == OpUnwatch) {
		w.prefixRequest(r)
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

// occupiedInfo fills the holder fields of a response from rec (under
// view).
func (w *worker) occupiedInfo(resp *wire.Response, key string, ks *keyState, rec *lockRec) {
	if rec.n() == 0 {
		return
	}
	h := rec.at(0)
	resp.Holder, resp.Token, resp.Kind, resp.Value = h.owner, h.token, rec.kind(), rec.value(0)
	if rec.kind() == wire.KindRead {
		resp.Readers = uint32(rec.n())
	}
	resp.TTLLeftMs = w.ttlLeft(key, rec, 0, w.clock.Now())
	if ks != nil {
		resp.QueueLen = uint32(len(ks.waiters))
	}
	w.semInfo(resp, key, rec, "", false)
}

func (w *worker) answerState(r *Request, key string) {
	resp := wire.Response{Status: wire.StatusLockDeleted}
	w.g.sm.view(key, func(rec *lockRec) {
		if rec.n() == 0 {
			return
		}
		resp.Status = wire.StatusSuccess
		w.occupiedInfo(&resp, key, w.keys[key], rec)
		// Report the hold with the token asked about (a token check),
		// else the asker's own hold if it has one.
		if i := rec.findToken(r.Token); r.Token != 0 && i >= 0 {
			w.holdInfo(&resp, key, rec, i)
		} else if i := rec.find(r.Owner); i >= 0 && i != 0 {
			resp.Holder, resp.Token, resp.Value = rec.at(i).owner, rec.at(i).token, rec.value(i)
		}
		w.semInfo(&resp, key, rec, r.Key, true)
	})
	if resp.Status == wire.StatusLockDeleted {
		if ks := w.keys[key]; ks != nil {
			resp.QueueLen = uint32(len(ks.waiters))
		}
		w.delayInfo(&resp, key)
		w.respond(r, resp)
		return
	}
	w.delayInfo(&resp, key)
	if w.isRevoked(key, resp.Holder, resp.Token) {
		// A revoked hold is not current from the force-unlock on: no
		// time is left to it, whatever its deadline (a token check
		// counts a hold current only while time is left), so that a
		// resource checking tokens refuses the holder the operator
		// cut off while the master waits for its acknowledgement.
		resp.TTLLeftMs = 0
		resp.Msg = "revoked by an operator; ends when its holder releases it or its deadline passes"
	}
	w.respond(r, resp)
}

// holdInfo makes hold i of rec (under view) the one resp names: holder,
// token, value and TTL left.
func (w *worker) holdInfo(resp *wire.Response, key string, rec *lockRec, i int) {
	h := rec.at(i)
	resp.Holder, resp.Token, resp.Value = h.owner, h.token, rec.value(i)
	resp.TTLLeftMs = w.ttlLeft(key, rec, i, w.clock.Now())
}

func (w *worker) renew(r *Request, key string, ks *keyState) {
	var st wire.Status
	var h holder // r.Owner's hold, when st is SUCCESS
	var dl int64 // its deadline, 0 when unknown
	w.g.sm.view(key, func(rec *lockRec) {
		if st = checkHolder(rec, r.Owner, r.Token); st == wire.StatusSuccess {
			h = *rec.at(rec.find(r.Owner))
			dl = w.deadlineIn(key, rec, &h)
		}
	})
	if st != wire.StatusSuccess {
		w.respond(r, wire.Response{Status: st})
		return
	}
	if w.isRevoked(key, r.Owner, r.Token) {
		w.respond(r, wire.Response{Status: wire.StatusRevoked, Msg: "force-unlocked by an operator; release the token"})
		return
	}
	if !w.renewAdmits(r, &h, dl) {
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
	n, i := 0, -1
	var h holder // r.Owner's hold, when i >= 0
	w.g.sm.view(key, func(rec *lockRec) {
		if n, i = rec.n(), rec.find(r.Owner); i >= 0 {
			h = *rec.at(i)
		}
	})
	switch {
	case n == 0:
		w.respond(r, wire.Response{Status: wire.StatusLockDeleted})
		return
	case i < 0:
		w.respond(r, wire.Response{Status: wire.StatusLockChangedOwner})
		return
	case h.kind == wire.KindExclusive:
		w.respond(r, wire.Response{Status: wire.StatusBadRequest, Msg: "an exclusive lock cannot be downgraded; use a read-write lock"})
		return
	case w.isRevoked(key, r.Owner, h.token):
		w.respond(r, wire.Response{Status: wire.StatusRevoked, Msg: "force-unlocked by an operator; release the token"})
		return
	}
	w.propose(ks, &pending{req: r, cmd: command{op: opDowngrade, key: key, owner: r.Owner, kind: wire.KindRead, token: h.token, ttlMs: w.ttl(r)}})
}

func (w *worker) release(r *Request, key string, ks *keyState) {
	if r.Permits != 0 {
		w.releasePart(r, key, ks)
		return
	}
	var st wire.Status
	var ws []*waiter
	var rest int
	var kind wire.Kind
	var passOn *holder // the pass-on owner's hold, a copy
	w.g.sm.view(key, func(rec *lockRec) {
		if st = checkHolder(rec, r.Owner, r.Token); st != wire.StatusSuccess {
			if r.PassOn.IsZero() || st == wire.StatusLockDeleted {
				return
			}
			if i := rec.find(r.PassOn); i >= 0 {
				h := *rec.at(i)
				passOn = &h
			}
			return
		}
		ws, rest, kind = w.pick(ks, rec, r.Owner, r.Token), without(rec, r.Owner, r.Token), rec.kind()
	})
	if st != wire.StatusSuccess {
		if passOn != nil {
			// A retried pass-on that was applied: the pass-on owner
			// holds the key now. Say so again.
			w.respond(r, wire.Response{Status: wire.StatusSuccess, Holder: r.PassOn, Token: passOn.token, TTLLeftMs: passOn.ttlMs})
			return
		}
		w.respond(r, wire.Response{Status: st})
		return
	}
	if w.isRevoked(key, r.Owner, r.Token) {
		// The holder acknowledges a revocation: the key goes as after a
		// force-unlock (an involuntary end, EventRevoked to watchers).
		e := w.expiryOf(key, r.Owner, r.Token)
		w.propose(ks, &pending{req: r, lost: e, forced: true, grants: ws, cmd: command{op: opExpire, key: key, owner: r.Owner, token: r.Token, grants: w.grantsFor(ks, ws)}})
		return
	}
	p := &pending{req: r, grants: ws, cmd: command{op: opRelease, key: key, owner: r.Owner, token: r.Token, grants: w.grantsFor(ks, ws)}}
	if !r.PassOn.IsZero() && rest == 0 && len(ks.waiters) == 0 && exclusive(kind) {
		// The local queue's pass-on: nobody waits here, so the key
		// goes on to the same client's next waiter in this command,
		// with a new token (grants are applied after the release).
		p.passOn = true
		p.cmd.grants = []grant{{owner: r.PassOn, kind: kind, ttlMs: w.ttl(r), value: r.Value, delayMs: lockDelayOf(r)}}
	}
	if w.obs != nil {
		p.grantedAt, _ = w.grantedAt(key, r.Owner, r.Token)
	}
	w.propose(ks, p)
}
