package group

// Semaphores. A key of kind wire.KindSemaphore is a counting semaphore:
// its record holds one hold per owner, like a read lock's readers, each
// with the permits it took (recExt.perm) out of the semaphore's total
// (recExt.limit). Everything that works on holds — tokens, TTLs, renewal,
// expiry on the master's clock, Lost, watches, force-release, List — works
// on a semaphore's holds unchanged; what differs is who may be granted:
//
//   - an acquire of n permits is granted when the permits in use plus n
//     are at most the total, and no waiter ranks ahead of it in the key's
//     queue (the queue of locks: arrival minus weight × WeightAging);
//   - a waiter is granted only when every waiter ahead of it was, so a
//     large request at the head is not overtaken by smaller ones behind
//     it (no barging);
//   - the total is set by the acquire that finds the semaphore without
//     holders, kept in the record while it has any, and changed by
//     opSetPermits; an acquire that names another total is refused
//     (BAD_REQUEST with the total) unless its owner holds permits already;
//   - an acquire by an owner that holds permits (a retried acquire, or a
//     client that gave up on a release whose outcome it does not know) is
//     a reacquire: it keeps the token, refreshes the TTL and value, and
//     sets the hold's permits to the asked number if the other holders'
//     permits leave room for it (else LOCK_OCCUPIED, the hold unchanged),
//     so that the holder has what its last successful acquire said.
//
// A semaphore without holders keeps nothing, so the next user sets the
// total again.
//
// Tokens are groupVersion<<48 | instance as for locks: grants in one
// command share a token, as readers granted in one command do.

import (
	"encoding/binary"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// semRecVersion is the checkpoint record version of a semaphore: version,
// kind, limit, holds, then per hold owner, token, ttl, permits, value.
const semRecVersion = 3

// isSem reports whether l is a semaphore's record with holds.
func isSem(l *lockRec) bool { return l.n() > 0 && l.kind() == wire.KindSemaphore }

// limit returns a semaphore record's permit total (0 for none).
func (l *lockRec) limit() uint32 {
	if l == nil || l.x == nil {
		return 0
	}
	return l.x.limit
}

// permitsAt returns hold i's permits (0 for a lock's hold).
func (l *lockRec) permitsAt(i int) uint32 {
	if l == nil || l.x == nil || i >= len(l.x.perm) {
		return 0
	}
	return l.x.perm[i]
}

// inUse returns the permits l's holds have, leaving out owner's hold with
// token (pass the zero owner to count them all).
func (l *lockRec) inUse(owner wire.Owner, token uint64) uint64 {
	var n uint64
	for i := range l.n() {
		if h := l.at(i); h.owner != owner || h.token != token {
			n += uint64(l.permitsAt(i))
		}
	}
	return n
}

// addSem appends a semaphore hold of permits with value v, and sets the
// record's total to limit.
func (l *lockRec) addSem(h holder, v string, permits, limit uint32) {
	if l.x == nil {
		l.x = &recExt{}
	}
	l.x.limit = limit
	l.x.perm = append(l.x.perm, permits)
	l.add(h, v)
}

// semCanGrant reports whether owner o may take permits of a semaphore
// whose total is limit when it has no holders, and whether that is a
// reacquire of a hold it has.
func (l *lockRec) semCanGrant(o wire.Owner, permits, limit uint32) (ok, again bool) {
	switch {
	case l.n() == 0:
		return permits > 0 && permits <= limit, false
	case l.kind() != wire.KindSemaphore:
		return false, false
	}
	if i := l.find(o); i >= 0 {
		ok := permits > 0 && l.inUse(o, l.at(i).token)+uint64(permits) <= uint64(l.limit())
		return ok, ok
	}
	return permits > 0 && l.inUse(wire.Owner{}, 0)+uint64(permits) <= uint64(l.limit()), false
}

// semGrant is grant for a semaphore acquire.
func (sm *StateMachine) semGrant(lp **lockRec, instance uint64, g grant) (wire.Status, uint64) {
	l := *lp
	if l.n() > 0 && l.kind() != wire.KindSemaphore {
		return wire.StatusLockOccupied, 0
	}
	if i := l.find(g.owner); i >= 0 {
		h := l.at(i)
		if g.permits == 0 || l.inUse(g.owner, h.token)+uint64(g.permits) > uint64(l.limit()) {
			return wire.StatusLockOccupied, 0
		}
		h.ttlMs = g.ttlMs
		l.x.perm[i] = g.permits
		l.setValue(i, g.value)
		l.setDelay(i, g.delayMs)
		l.setMaxHold(i, g.maxHoldMs)
		return wire.StatusSuccess, h.token
	}
	limit := g.limit
	if l.limit() != 0 {
		// The record's total, also when this command removed its last
		// hold: a total set meanwhile (opSetPermits) outlives the
		// waiter's idea of it.
		limit = l.limit()
	}
	if g.permits == 0 || l.inUse(wire.Owner{}, 0)+uint64(g.permits) > uint64(limit) {
		return wire.StatusLockOccupied, 0
	}
	if l == nil {
		l = &lockRec{}
		*lp = l
	}
	tok := sm.token(instance)
	l.addSem(holder{owner: g.owner, token: tok, ttlMs: g.ttlMs, kind: wire.KindSemaphore}, g.value, g.permits, limit)
	l.setDelay(l.n()-1, g.delayMs)
	l.setMaxHold(l.n()-1, g.maxHoldMs)
	return wire.StatusSuccess, tok
}

// appendSem writes a command's semaphore fields (see appendCommand).
func appendSem(dst []byte, c *command) []byte {
	dst = binary.AppendUvarint(dst, uint64(c.permits))
	dst = binary.AppendUvarint(dst, uint64(c.limit))
	gs := false
	for _, g := range c.grants {
		gs = gs || g.permits != 0 || g.limit != 0
	}
	if !gs {
		return binary.AppendUvarint(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(c.grants)))
	for _, g := range c.grants {
		dst = binary.AppendUvarint(dst, uint64(g.permits))
		dst = binary.AppendUvarint(dst, uint64(g.limit))
	}
	return dst
}

// decodeSem reads what appendSem wrote.
func decodeSem(r *reader, c *command) {
	c.permits = r.u32()
	c.limit = r.u32()
	r.perGrant(c, func(g *grant) {
		g.permits = r.u32()
		g.limit = r.u32()
	})
}

// u32 reads a uvarint that must fit 32 bits.
func (r *reader) u32() uint32 {
	v := r.Uvarint()
	if v > 1<<32-1 {
		r.Fail()
		return 0
	}
	return uint32(v)
}

// encodeSemRec encodes a semaphore's record (semRecVersion).
func encodeSemRec(dst []byte, l *lockRec) []byte {
	dst = append(dst, semRecVersion, byte(wire.KindSemaphore))
	dst = binary.AppendUvarint(dst, uint64(l.limit()))
	dst = binary.AppendUvarint(dst, uint64(l.n()))
	for i := range l.n() {
		h := l.at(i)
		dst = binary.AppendUvarint(dst, h.owner.Client)
		dst = binary.AppendUvarint(dst, h.owner.ID)
		dst = binary.AppendUvarint(dst, h.token)
		dst = binary.AppendUvarint(dst, uint64(h.ttlMs))
		dst = binary.AppendUvarint(dst, uint64(l.permitsAt(i)))
		dst = appendValue(dst, l.value(i))
	}
	return dst
}

// decodeSemRec decodes a semaphore's record after its version byte.
func decodeSemRec(r *reader) (*lockRec, error) {
	if wire.Kind(r.Byte()) != wire.KindSemaphore {
		return nil, fmt.Errorf("group: semaphore record kind: %w", errBadCommand)
	}
	limit := r.u32()
	n := r.Uvarint()
	if n == 0 || n > uint64(r.Len()) {
		return nil, errBadCommand
	}
	l := &lockRec{}
	for i := uint64(0); i < n && !r.Failed(); i++ {
		h := holder{kind: wire.KindSemaphore}
		h.owner.Client = r.Uvarint()
		h.owner.ID = r.Uvarint()
		h.token = r.Uvarint()
		h.ttlMs = uint32(r.Uvarint())
		p := r.u32()
		v := r.value()
		if p == 0 {
			r.Fail()
		}
		l.addSem(h, v, p, limit)
	}
	if !r.Done() {
		return nil, errBadCommand
	}
	return l, nil
}

// canGrantReq is canGrant for request r, semaphores included.
func canGrantReq(rec *lockRec, r *Request) (ok, again bool) {
	if r.Kind == wire.KindSemaphore {
		return rec.semCanGrant(r.Owner, r.Permits, r.Limit)
	}
	return rec.canGrant(r.Owner, r.Kind)
}

// semMismatch reports whether semaphore acquire r names a total that is
// not that of the semaphore rec (under view) and is no reacquire.
func semMismatch(r *Request, rec *lockRec) bool {
	return isSem(rec) && rec.limit() != r.Limit && rec.find(r.Owner) < 0
}

// refuseSemLimit answers a semaphore acquire whose total is not the
// semaphore's, limit.
func (w *worker) refuseSemLimit(r *Request, limit uint32) {
	_, name := splitFull(w.key(r))
	w.respond(r, wire.Response{Status: wire.StatusBadRequest, Permits: limit,
		Msg: fmt.Sprintf("semaphore %q has %d permits, the request says %d", name, limit, r.Limit)})
}

// pick chooses the waiters that get key once owner's hold with token is
// gone from rec (the zero owner: none goes), semaphores included.
// At most Config.MaxHoldersPerKey holders in all: the rest wait.
func (w *worker) pick(ks *keyState, rec *lockRec, owner wire.Owner, token uint64) []*waiter {
	rest := without(rec, owner, token)
	var ws []*waiter
	if isSem(rec) || (rec.n() == 0 && len(ks.waiters) > 0 && ks.waiters[0].req.Kind == wire.KindSemaphore) {
		ws = pickSemGrants(ks, rec, owner, token, 0, 0)
	} else {
		var kind wire.Kind
		if rec.n() > 0 {
			kind = rec.kind()
		}
		ws = pickGrants(ks, rest, kind)
	}
	ws = w.holderRoom(ws, rest)
	if len(ws) > 0 {
		ws = ws[:w.adm.heldRoom(ws[0].req.Namespace, len(ws), rec.n()-rest, rest)]
	}
	return ws
}

// holderRoom keeps of the waiters ws, in order, those that fit beside
// rest holders under Config.MaxHoldersPerKey.
func (w *worker) holderRoom(ws []*waiter, rest int) []*waiter {
	room := max(w.cfg.MaxHoldersPerKey-rest, 0)
	return ws[:min(len(ws), room)]
}

// holdersFull is told of an acquire that would add a holder to a key
// that has Config.MaxHoldersPerKey already (readers of a read lock,
// holders of a semaphore): a key's record is copied into State answers,
// watch events and snapshots, so it stays bounded. A try-lock is
// answered OVERLOADED with RetryAfterMs (room comes back as holders
// release) and it reports true; a blocking acquire is left to wait in the
// key's queue (false).
func (w *worker) holdersFull(r *Request) bool {
	if r.MaxWait != 0 {
		return false
	}
	max := w.cfg.MaxHoldersPerKey
	w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: overloadRetryMs,
		Msg: fmt.Sprintf("too many holders of this key (%d)", max)})
	return true
}

// pickSemGrants chooses the semaphore waiters granted once owner's hold
// with token is down to keep permits (0: gone): the head waiters in queue
// order while their permits fit, stopping at the first that does not (no
// barging). The total is limit when not 0, else the record's, else the
// head waiter's.
func pickSemGrants(ks *keyState, rec *lockRec, owner wire.Owner, token uint64, limit, keep uint32) []*waiter {
	const maxGrants = 64
	if limit == 0 {
		limit = rec.limit()
	}
	if limit == 0 && len(ks.waiters) > 0 {
		limit = ks.waiters[0].req.Limit
	}
	used := rec.inUse(owner, token) + uint64(keep)
	var out []*waiter
	for _, q := range ks.waiters {
		if q.granting {
			return nil
		}
		if q.req.Kind != wire.KindSemaphore || used+uint64(q.req.Permits) > uint64(limit) {
			break
		}
		used += uint64(q.req.Permits)
		out = append(out, q)
		if len(out) == maxGrants {
			break
		}
	}
	return out
}

// setPermits proposes a held semaphore's new total (wire.FlagSetPermits),
// with the grants a higher total allows. A semaphore without holders keeps
// no total: SUCCESS at once.
func (w *worker) setPermits(r *Request, key string, ks *keyState) {
	var n int
	var sem bool
	var ws []*waiter
	w.g.sm.view(key, func(rec *lockRec) {
		if n, sem = rec.n(), isSem(rec); sem {
			ws = w.holderRoom(pickSemGrants(ks, rec, wire.Owner{}, 0, r.Limit, 0), n)
		}
	})
	switch {
	case n == 0:
		w.respond(r, wire.Response{Status: wire.StatusSuccess, Permits: r.Limit})
		return
	case !sem:
		w.respond(r, wire.Response{Status: wire.StatusBadRequest, Msg: "the key is held as a lock, not a semaphore"})
		return
	}
	w.propose(ks, &pending{req: r, grants: ws, cmd: command{op: opSetPermits, key: key, kind: wire.KindSemaphore, limit: r.Limit, grants: w.grantsFor(ks, ws)}})
}

// semInfo adds a semaphore's (key's record rec, under view) total and permits in use to resp, and with
// holders one entry per hold (owner, permits, value, token, TTL left),
// at most wire.MaxListLimit of them and listReplyBytes of them encoded
// (More set when some were left out), so that the answer fits a frame.
func (w *worker) semInfo(resp *wire.Response, key string, rec *lockRec, name string, holders bool) {
	if !isSem(rec) {
		return
	}
	resp.Permits, resp.InUse = rec.limit(), uint32(min(rec.inUse(wire.Owner{}, 0), 1<<32-1))
	resp.Readers = uint32(rec.n())
	if !holders {
		return
	}
	now := w.clock.Now()
	size := 0
	for i := range min(rec.n(), wire.MaxListLimit) {
		if size += len(name) + len(rec.value(i)) + 64; size > listReplyBytes {
			resp.More = true
			return
		}
		h := rec.at(i)
		li := wire.LockInfo{Key: name, Holder: h.owner, Token: h.token, Kind: wire.KindSemaphore, TTLLeftMs: w.ttlLeft(key, rec, i, now),
			Value: rec.value(i), Permits: rec.permitsAt(i), Limit: rec.limit()}
		resp.Locks = append(resp.Locks, li)
	}
	resp.More = rec.n() > wire.MaxListLimit
}
