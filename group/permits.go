package group

// Partial release of a semaphore hold. A holder of n permits may give
// some back and keep the rest (Request.Permits on an OpRelease: the
// permits to keep, 1..n-1; wire.Release.KeepPermits). The command is an
// opRelease with the permits to keep in its tail (cmdKeepPermits): it sets
// the hold's permits to that number, keeping its token, TTL, deadline,
// value and place among the holders, and grants the waiters that the freed
// permits let in, in the same command, as a full release does.
//
// The command names what is left, not what goes: applying it twice (a
// client's retry of a release whose answer it lost, or a command chosen
// again after a master change) leaves the same hold. Keeping as many
// permits as the hold has succeeds and changes nothing; keeping more is
// BAD_REQUEST and changes nothing.
//
// A replica that predates cmdKeepPermits refuses to decode the command
// (unknown tail flag) rather than apply it as a full release.

import (
	"github.com/paxlock/paxlock/client/wire"
)

// cmdKeepPermits, in a command tail's flags, says a partial release's
// permits to keep follow the maximum hold times (see appendCommand):
//
//	keep = permits uvarint (at least 1)
const cmdKeepPermits = 1 << 5

// decodeKeep reads the permits to keep; 0, or on a command other than a
// release, is an error.
func decodeKeep(r *reader, c *command) {
	if c.keep = r.u32(); c.keep == 0 || c.op != opRelease {
		r.Fail()
	}
}

// releasePart proposes lowering r.Owner's semaphore hold with r.Token to
// r.Permits permits, with the grants the freed permits allow. Keeping
// all of the hold's permits is answered SUCCESS at once; keeping more, or
// a hold that is no semaphore's, BAD_REQUEST.
func (w *worker) releasePart(r *Request, key string, ks *keyState) {
	var st wire.Status
	var held uint32
	var ws []*waiter
	w.g.sm.view(key, func(rec *lockRec) {
		if st = checkHolder(rec, r.Owner, r.Token); st != wire.StatusSuccess {
			return
		}
		if !isSem(rec) {
			st = wire.StatusBadRequest
			return
		}
		held = rec.permitsAt(rec.find(r.Owner))
		if r.Permits < held {
			ws = w.holderRoom(pickSemGrants(ks, rec, r.Owner, r.Token, 0, r.Permits), rec.n())
			if len(ws) > 0 {
				ws = ws[:w.adm.heldRoom(ws[0].req.Namespace, len(ws), 0, rec.n())]
			}
		}
	})
	switch {
	case st == wire.StatusBadRequest:
		w.respond(r, wire.Response{Status: st, Msg: "the key is held as a lock, not a semaphore"})
		return
	case st != wire.StatusSuccess:
		w.respond(r, wire.Response{Status: st})
		return
	case w.isRevoked(key, r.Owner, r.Token):
		w.respond(r, wire.Response{Status: wire.StatusRevoked, Msg: "force-unlocked by an operator; release the token"})
		return
	case r.Permits > held:
		w.respond(r, wire.Response{Status: wire.StatusBadRequest, Permits: held,
			Msg: "the hold has fewer permits than the release keeps"})
		return
	case r.Permits == held:
		w.respond(r, wire.Response{Status: wire.StatusSuccess, Token: r.Token, Permits: held})
		return
	}
	w.propose(ks, &pending{req: r, grants: ws, cmd: command{op: opRelease, key: key, owner: r.Owner, token: r.Token,
		keep: r.Permits, grants: w.grantsFor(ks, ws)}})
}

// keepPermits applies a partial release to hold i of *lp (owner and token
// checked): the hold keeps c.keep permits, then c.grants are granted.
func (sm *StateMachine) keepPermits(s *shard, lp **lockRec, i int, instance uint64, c *command, out *outcome) {
	l := *lp
	held := l.permitsAt(i)
	switch {
	case l.kind() != wire.KindSemaphore || c.keep > held:
		out.status = wire.StatusBadRequest
		return
	case c.keep < held:
		l.x.perm[i] = c.keep
	}
	sm.applyGrants(s, lp, instance, c, out)
}

// releasedPart answers an applied partial release: the hold stays, with
// its token and deadline, so the answer is due, and the watchers that
// have seen the hold hear that it changed (EventAcquired with its token
// again, as for a new value; State gives the permits). The grants are
// settled by applied.
func (w *worker) releasedPart(ks *keyState, key, name string, p *pending, out *outcome) {
	resp := wire.Response{Status: out.status, Token: out.token}
	if out.status == wire.StatusSuccess {
		resp.Permits = p.cmd.keep
		var value string
		w.g.sm.view(key, func(rec *lockRec) {
			if i := rec.find(p.req.Owner); i >= 0 {
				value = rec.value(i)
			}
		})
		w.notifyValue(ks, key, name, out.token, p.req.Owner, value)
	}
	w.respond(p.req, resp)
}
