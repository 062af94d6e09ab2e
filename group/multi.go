package group

import (
	"cmp"
	"encoding/binary"
	"slices"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// Multi-acquire: exclusive locks on several keys of one group, decided in
// one Paxos command (opMultiAcquire), all or none.
//
// The keys of a group may belong to different workers, each of which alone
// decides for its keys. A multi-acquire therefore first reserves its keys,
// one worker after the other in one global order (worker index, then key):
// on each key's worker, once no change of the key is in flight, it checks
// that the key is free (or already the same owner's: a retry) and has no
// waiters, and marks the key busy, exactly as a single change in flight
// does, so that every other request for the key is deferred behind it. A
// key that is held or queued ends the multi-acquire: the keys reserved so
// far are given back (evMultiUndo) and the answer is LOCK_OCCUPIED naming
// the key. With every key reserved, the last worker proposes the command;
// its outcome goes back to every key's worker (evMultiDone), which records
// the hold's deadline, tells the key's watchers and lets the deferred
// requests go on, and the requester is answered.
//
// No deadlock: a multi-acquire waits only for a change in flight (which
// ends) or for a reservation of another multi-acquire on a key that comes
// earlier in the global order, so waits never form a cycle. The state
// machine decides again when it applies the command (all keys grantable,
// or none is granted), so a follower and a restart replay reach the same
// table whatever the master did.
//
// Tokens: every key the command grants gets the command's token
// (groupVersion<<48 | instance), the same for all its keys; a key the
// owner held already keeps its token. A key's tokens still strictly
// increase, since a key takes part in at most one owner-changing command
// per instance (it is busy while one is in flight).

// MultiKey is one key of a multi-acquire and the owner to hold it.
type MultiKey struct {
	Key   string
	Owner wire.Owner
}

// multiEnt is one key of a multi-acquire on the master.
type multiEnt struct {
	key    string // full key
	name   string // key within the namespace
	owner  wire.Owner
	orig   int    // index in the request
	worker int    // the key's worker
	term   uint64 // the worker's term when it reserved the key
}

// multiAcq is a multi-acquire in progress. It is handed from worker to
// worker while its keys are reserved (only one of them has it at a time),
// then to the paxos callback, after which the workers read it only.
type multiAcq struct {
	g    *Group
	req  *Request // Namespace, Owner.Client, TTL, Value, ReqID, Sink, Start
	ents []multiEnt
	ttl  uint32
	next int // the next key to reserve
	// admitted: the namespace's quotas let it through (checked once, by
	// the first reservation).
	admitted bool
}

// multiOutcome is an opMultiAcquire's outcome beyond its status:
// tokens[i] is the token of the command's i-th key (success), index the
// key that was not grantable (LOCK_OCCUPIED), keys[i] the lock table's
// copy of a key whose record the command created ("" otherwise).
type multiOutcome struct {
	tokens []uint64
	keys   []string
	index  int
}

var noMaster = wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50}

// SubmitMulti takes exclusive locks on keys (1 to wire.MaxMultiKeys,
// distinct, all in r's group) for their owners, all or none, in one Paxos
// command. r carries the namespace, TTL, value and the answer's ReqID and
// Sink; r.Key is keys[0]. It never waits for a holder: a key held by
// another owner or with waiters queued fails the request with
// LOCK_OCCUPIED and KeyIndex. The answer's Tokens are in keys' order.
func (s *Service) SubmitMulti(r *Request, keys []MultiKey) {
	r.Op = OpMultiAcquire
	bad := func(msg string) {
		if r.Sink != nil {
			r.Sink.Respond(r.ReqID, wire.Response{Status: wire.StatusBadRequest, Msg: msg})
		}
	}
	if len(keys) == 0 || len(keys) > wire.MaxMultiKeys {
		bad("multi-acquire: 1 to 64 keys")
		return
	}
	g := -1
	m := &multiAcq{req: r, ents: make([]multiEnt, len(keys))}
	for i, k := range keys {
		h := wire.KeyHash(r.Namespace, k.Key)
		kg := wire.GroupOf(h, len(s.groups))
		if g >= 0 && kg != g {
			bad("multi-acquire: keys of different lock groups")
			return
		}
		g = kg
		m.ents[i] = multiEnt{key: fullKey(r.Namespace, k.Key), name: k.Key, owner: k.Owner, orig: i,
			worker: wire.WorkerOf(h, len(s.groups[g].workers))}
	}
	slices.SortFunc(m.ents, func(a, b multiEnt) int {
		return cmp.Or(cmp.Compare(a.worker, b.worker), cmp.Compare(a.key, b.key))
	})
	for i := 1; i < len(m.ents); i++ {
		if m.ents[i].key == m.ents[i-1].key {
			bad("multi-acquire: a key named twice")
			return
		}
	}
	m.g = s.groups[g]
	r.Key, r.Hash = keys[0].Key, wire.KeyHash(r.Namespace, keys[0].Key)
	w0 := m.g.workers[m.ents[0].worker]
	m.ttl = w0.ttl(r)
	w0.post(event{kind: evMulti, multi: m})
}

// multiReserve reserves m's keys that belong to w, from m.next on, then
// hands m to the next keys' worker, or proposes the command when every key
// is reserved.
func (w *worker) multiReserve(m *multiAcq) {
	resp, ok, parked := w.multiCheck(m)
	switch {
	case parked:
		return
	case !ok:
		w.multiFail(m, resp)
	case m.next < len(m.ents):
		m.g.workers[m.ents[m.next].worker].post(event{kind: evMulti, multi: m})
	default:
		w.multiPropose(m)
	}
}

// multiCheck is multiReserve's part under the lease check: it reserves
// what it can, and reports a refusal (ok false, resp the answer) or that m
// waits for a change of a key in flight (parked).
func (w *worker) multiCheck(m *multiAcq) (resp wire.Response, ok, parked bool) {
	w.g.serve.RLock()
	defer w.g.serve.RUnlock()
	if !w.serving || !w.g.leaseValid() {
		return noMaster, false, false
	}
	if g, moving := w.g.sm.gateNS(m.req.Namespace); moving {
		return gateResponse(g), false, false
	}
	if resp, ok := w.adm.multiAdmits(m); !ok {
		return resp, false, false
	}
	for ; m.next < len(m.ents) && m.ents[m.next].worker == w.idx; m.next++ {
		e := &m.ents[m.next]
		ks := w.state(e.key)
		if ks.busy {
			ks.multis = append(ks.multis, m) // resume goes on with it
			return resp, false, true
		}
		var grantable, again bool
		w.g.sm.view(e.key, func(rec *lockRec) { grantable, again = rec.canGrant(e.owner, wire.KindExclusive) })
		var delayed time.Duration
		if grantable && !again {
			switch st, left := w.delayCheck(e.key, ks); st {
			case delayRunning:
				grantable, delayed = false, left
			case delayEnding:
				ks.multis = append(ks.multis, m) // resume goes on with it
				return resp, false, true
			}
		}
		if !grantable || (!again && len(ks.waiters) > 0) {
			// Held, in a lock-delay, or queued for: a multi-acquire
			// never overtakes a waiter.
			resp = wire.Response{Status: wire.StatusLockOccupied, KeyIndex: uint32(e.orig)}
			w.g.sm.view(e.key, func(rec *lockRec) { w.occupiedInfo(&resp, e.key, ks, rec) })
			resp.QueueLen = uint32(len(ks.waiters))
			if delayed > 0 {
				resp.RetryAfterMs = uint32((delayed + time.Millisecond - 1) / time.Millisecond)
				resp.Msg = "lock-delay"
			}
			w.tidy(e.key, ks)
			return resp, false, false
		}
		ks.busy = true
		e.term = w.term
	}
	return resp, true, false
}

// multiFail gives back m's reservations and answers resp.
func (w *worker) multiFail(m *multiAcq, resp wire.Response) {
	for i := range m.next {
		m.g.workers[m.ents[i].worker].post(event{kind: evMultiUndo, multi: m, n: i})
	}
	w.respond(m.req, resp)
}

// multiUndo gives back key n's reservation of m, unless the mastership it
// was made under is gone (and the key's state with it).
func (w *worker) multiUndo(m *multiAcq, n int) {
	e := &m.ents[n]
	ks := w.keys[e.key]
	if ks == nil || e.term != w.term || !w.serving {
		return
	}
	ks.busy = false
	w.resume(e.key, ks)
}

// multiPropose proposes m's command; its keys are all reserved.
func (w *worker) multiPropose(m *multiAcq) {
	c := command{op: opMultiAcquire, key: m.ents[0].key, owner: m.ents[0].owner, kind: wire.KindExclusive,
		ttlMs: m.ttl, value: m.req.Value, data: encodeMultiKeys(m.ents)}
	w.g.px.Submit(appendCommand(nil, &c), func(res paxos.Result) { m.g.multiResult(m, res) })
}

// multiResult tells every key's worker m's outcome and answers the
// requester. It runs on the paxos host's loop.
func (g *Group) multiResult(m *multiAcq, res paxos.Result) {
	for i := range m.ents {
		g.workers[m.ents[i].worker].post(event{kind: evMultiDone, multi: m, n: i, res: res})
	}
	out, _ := res.Value.(*outcome)
	w := g.workers[0]
	switch {
	case res.Err != nil || out == nil:
		// Perhaps chosen after all: a retry reacquires with the same
		// tokens.
		w.respond(m.req, wire.Response{Status: statusOf(res.Err), RetryAfterMs: 50})
	case out.status == wire.StatusSuccess && out.multi != nil:
		resp := wire.Response{Status: wire.StatusSuccess, TTLLeftMs: m.ttl, Tokens: make([]uint64, len(m.ents))}
		for i, e := range m.ents {
			resp.Tokens[e.orig] = out.multi.tokens[i]
		}
		resp.Token = resp.Tokens[0]
		w.respond(m.req, resp)
	case out.status == wire.StatusLockOccupied && out.multi != nil:
		w.respond(m.req, wire.Response{Status: out.status, KeyIndex: uint32(m.ents[out.multi.index].orig)})
	default:
		w.respond(m.req, wire.Response{Status: out.status})
	}
}

// multiDone applies m's outcome to key n on its worker: the new hold's
// deadline and the watchers' event, then the requests deferred behind it.
func (w *worker) multiDone(m *multiAcq, n int, res paxos.Result) {
	e := &m.ents[n]
	ks := w.keys[e.key]
	if ks == nil || e.term != w.term || !w.serving {
		return // proposed under a mastership since lost
	}
	ks.busy = false
	out, _ := res.Value.(*outcome)
	if res.Err == nil && out != nil && out.status == wire.StatusSuccess && out.multi != nil {
		tok := out.multi.tokens[n]
		key := e.key
		if k := out.multi.keys[n]; k != "" {
			key = k
		}
		if obs := w.obs; obs != nil {
			obs.Count(StatGrant)
		}
		w.armDeadline(key, tok, e.owner, m.req.Sink, w.clock.Now().Add(time.Duration(m.ttl)*time.Millisecond))
		w.notify(ks, e.key, e.name, wire.EventAcquired, tok, e.owner, m.req.Value)
	}
	w.resume(e.key, ks)
}

// encodeMultiKeys encodes a multi-acquire's keys and owners for
// command.data: count, then per key its length, bytes, owner client and
// owner id (uvarints).
func encodeMultiKeys(ents []multiEnt) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ents)))
	for _, e := range ents {
		b = binary.AppendUvarint(b, uint64(len(e.key)))
		b = append(b, e.key...)
		b = binary.AppendUvarint(b, e.owner.Client)
		b = binary.AppendUvarint(b, e.owner.ID)
	}
	return b
}

// decodeMultiKeys is encodeMultiKeys' inverse; it refuses no keys, more
// than wire.MaxMultiKeys, a key named twice and trailing bytes.
func decodeMultiKeys(data []byte) ([]MultiKey, bool) {
	r := newReader(data)
	n := r.Uvarint()
	if r.Failed() || n == 0 || n > wire.MaxMultiKeys {
		return nil, false
	}
	ks := make([]MultiKey, 0, n)
	seen := make(map[string]struct{}, n)
	for range n {
		k := string(r.Bytes(r.Uvarint()))
		o := wire.Owner{Client: r.Uvarint(), ID: r.Uvarint()}
		if r.Failed() {
			return nil, false
		}
		if _, dup := seen[k]; dup {
			return nil, false
		}
		seen[k] = struct{}{}
		ks = append(ks, MultiKey{Key: k, Owner: o})
	}
	return ks, r.Len() == 0
}

// applyMulti applies opMultiAcquire: if every key can be granted to its
// owner in exclusive kind, each is (a reacquire keeps its token, refreshes
// TTL and value); otherwise none is and the outcome names the first key
// that could not. The keys' shards are locked together, in index order, so
// that no reader sees some of the keys granted and not the others.
func (sm *StateMachine) applyMulti(instance uint64, c *command) *outcome {
	keys, ok := decodeMultiKeys(c.data)
	if !ok || c.kind != wire.KindExclusive {
		return &outcome{status: wire.StatusError}
	}
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, wire.WorkerOf(hashFull(k.Key), sm.workers))
	}
	locked := slices.Clone(idx)
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		sm.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			sm.shards[i].mu.Unlock()
		}
	}()
	mo := &multiOutcome{}
	out := &outcome{status: wire.StatusSuccess, multi: mo}
	for i, k := range keys {
		s := &sm.shards[idx[i]]
		if ok, _ := s.locks[k.Key].canGrant(k.Owner, wire.KindExclusive); !ok || s.delayBlocks(k.Key, s.locks[k.Key], k.Owner) {
			out.status, mo.index = wire.StatusLockOccupied, i
			return out
		}
	}
	mo.tokens = make([]uint64, len(keys))
	mo.keys = make([]string, len(keys))
	for i, k := range keys {
		s := &sm.shards[idx[i]]
		l := s.locks[k.Key]
		was := l.n()
		_, mo.tokens[i] = sm.grant(&l, instance, grant{owner: k.Owner, kind: wire.KindExclusive, ttlMs: c.ttlMs, value: c.value})
		sm.put(k.Key, s, l, was)
		if was == 0 {
			mo.keys[i] = k.Key
		}
	}
	out.token = mo.tokens[0]
	return out
}
