package group

import (
	"cmp"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// How the masters enforce a namespace's Quota.
//
// Every master checks a request against this node's quota table: one
// atomic load of a map swapped whole when a quota changes (nil while no
// namespace has one, so a cluster without quotas pays that load and
// nothing else), then, for a namespace with a quota, atomics in its
// entry. Nothing is allocated and no lock is taken per request.
//
//   - Held: the quota counts holders, not keys — a writer, each reader
//     of a read lock, each holder of a semaphore's permits, each key of a
//     multi-acquire — so that readers and permit holders, bounded per key
//     only by Config.MaxHoldersPerKey, are bounded per namespace too. A
//     node replicates every lock group, so a master sums the namespace's
//     holders over its replicas of all groups (kept as one counter that
//     every replica's apply moves by the holders each command adds or
//     removes). An acquire that would add a holder is refused while the
//     sum is at the limit; a release, expiry or force-unlock hands the key
//     to at most as many waiters as the holds it frees plus the quota's
//     room (at least the head waiter when the key is left free, so that
//     its queue cannot stall), the others staying queued (heldRoom). The
//     sum lags: a grant counts on a node once that node has applied it —
//     on the grant's own master when it is chosen, on the other nodes when
//     the group's next Accept or heartbeat says it is chosen (within a
//     round on a busy group, within the heartbeat, 250 ms by default, on
//     an idle one) — so masters deciding meanwhile each see room for the
//     last holders. A namespace at its limit overshoots by its grants
//     within that lag, cluster-wide: TestQuotaHeldOvershoot's 16
//     acquirers taking fresh keys flat out against a quota of 40 on three
//     in-process nodes end with 57 to 68 held. A quota bounds resource
//     use; it is not a safety property, so that overshoot is accepted.
//   - Waiters and rate: blocked acquires live on the master that queues
//     them and requests reach only their key's master, so each node
//     enforces its share of the cluster-wide limit, in proportion to the
//     groups it serves (keys hash evenly over groups): a node serving
//     s of G groups admits ceil(limit × s / G) waiters and
//     rate × s / G requests per second, with a burst of
//     ceil(burst × s / G), each at least 1. The shares add up to the limit
//     (plus at most one per node from rounding up). A namespace whose load
//     is concentrated on a few keys gets only the share of the nodes
//     mastering them: one hot key on a three-node cluster gets a third.
//   - Releases, downgrades, cancelled waits and unwatches are never
//     refused by a quota and not counted against the rate: refusing them
//     would turn a quota into lost locks or stranded waiters. Renewals
//     count against the rate; only those beyond the hold's need (setting
//     a value, or renewing early) are refused by it (see renewAdmits).
//   - List counts against the rate by the keys it scans, one request per
//     wire.DefaultListLimit keys or part of it (see listAdmits).
//
// A refused request is answered OVERLOADED with RetryAfterMs (the rate:
// when the bucket has room again; the others: overloadRetryMs) and a Msg
// naming the quota; nothing is kept for it.

// QuotaKind names one of a Quota's limits, for the refusal counts.
type QuotaKind uint8

// The limits a request can be refused by.
const (
	QuotaHeld QuotaKind = iota
	QuotaWaiters
	QuotaRate
	// NumQuotaKinds is the number of QuotaKind values.
	NumQuotaKinds
)

// String returns the kind's metric label.
func (k QuotaKind) String() string {
	switch k {
	case QuotaHeld:
		return "held"
	case QuotaWaiters:
		return "waiters"
	case QuotaRate:
		return "rate"
	}
	return "unknown"
}

// The Msg of a refusal by each quota (constant: a refusal allocates
// nothing either).
const (
	msgQuotaHeld    = "namespace quota: holders at the limit"
	msgQuotaWaiters = "namespace quota: blocked acquires at the limit"
	msgQuotaRate    = "namespace quota: requests per second over the limit"
)

// nsQuota is one namespace's entry in the quota table: its limits and
// what this node counts against them. An entry lives as long as its
// namespace has a quota; a changed quota changes its limits in place.
type nsQuota struct {
	name                       string
	held, waiters, rate, burst atomic.Int64
	// heldUse is the namespace's holders summed over the groups whose
	// ready flag is set; counted says every group's is (until then the
	// held limit is not enforced).
	heldUse atomic.Int64
	counted atomic.Bool
	// ready[g]: group g's holders are in heldUse, and its apply moves
	// heldUse; guarded by group g's StateMachine.mu.
	ready []bool
	// tat is the rate's bucket: the theoretical arrival time (ns on the
	// service's quota clock) of the next request, as in the generic cell
	// rate algorithm, so that taking a token is one compare-and-swap
	// shared by the workers (golang.org/x/time/rate's Limiter, not in
	// this module's graph, takes a mutex per request).
	tat      atomic.Int64
	admitted atomic.Uint64
	refused  [NumQuotaKinds]atomic.Uint64
}

func (e *nsQuota) set(q Quota) {
	e.held.Store(q.Held)
	e.waiters.Store(q.Waiters)
	e.rate.Store(q.Rate)
	e.burst.Store(q.Burst)
}

func (e *nsQuota) quota() Quota {
	return Quota{Held: e.held.Load(), Waiters: e.waiters.Load(), Rate: e.rate.Load(), Burst: e.burst.Load()}
}

// quotaTable is a node's quota table, built from group 0's quota records
// (refresh) and read by the workers and every replica's apply.
type quotaTable struct {
	cur atomic.Pointer[map[string]*nsQuota] // nil: no namespace has a quota
	mu  sync.Mutex                          // serialises refresh
}

// lookup returns ns's entry, nil if ns has no quota.
func (t *quotaTable) lookup(ns string) *nsQuota {
	if t == nil {
		return nil
	}
	m := t.cur.Load()
	if m == nil {
		return nil
	}
	return (*m)[ns]
}

// refresh rebuilds the table from group 0's records: entries of
// namespaces that keep a quota keep their counts; a new entry is
// published first and then counts each group's holders under that
// group's lock, so that no grant or release is missed or counted twice.
func (t *quotaTable) refresh(s *Service) {
	t.mu.Lock()
	defer t.mu.Unlock()
	qs := s.Quotas()
	old := t.cur.Load()
	next := make(map[string]*nsQuota, len(qs))
	var fresh []*nsQuota
	for ns, q := range qs {
		var e *nsQuota
		if old != nil {
			e = (*old)[ns]
		}
		if e == nil {
			e = &nsQuota{name: ns, ready: make([]bool, len(s.groups))}
			fresh = append(fresh, e)
		}
		e.set(q)
		next[ns] = e
	}
	if len(next) == 0 {
		t.cur.Store(nil)
	} else {
		t.cur.Store(&next)
	}
	for _, e := range fresh {
		for _, g := range s.groups {
			g.sm.countQuotaHeld(e)
		}
		e.counted.Store(true)
	}
}

// countQuotaHeld adds the group's holders of e's namespace to e and
// makes the group's apply move e from now on.
func (sm *StateMachine) countQuotaHeld(e *nsQuota) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	e.heldUse.Add(sm.nsHeld[e.name].holders)
	e.ready[sm.gid] = true
}

// quotaHeld moves the holders of namespace ns's quota entry by d, if it
// has one that counts this group; sm.mu is held.
func (sm *StateMachine) quotaHeld(ns string, d int64) {
	if e := sm.quota.lookup(ns); e != nil && e.ready[sm.gid] {
		e.heldUse.Add(d)
	}
}

// uncountQuotaHeld takes the group's holders out of every quota entry,
// before Load counts them again; sm.mu is held.
func (sm *StateMachine) uncountQuotaHeld() {
	for ns, c := range sm.nsHeld {
		sm.quotaHeld(ns, -c.holders)
	}
}

// share is this node's part of a cluster-wide limit: ceil(limit × served
// / groups), at least 1 (see the top of this file).
func (s *Service) share(limit int64) int64 {
	served, groups := s.servedOf()
	return max((limit*served+groups-1)/groups, 1)
}

// servedOf returns how many groups this node serves (at least 1: a
// request reached one of them) and how many there are.
func (s *Service) servedOf() (served, groups int64) {
	groups = int64(len(s.groups))
	return min(max(int64(s.served.Load()), 1), groups), groups
}

// quotaNow is the rate buckets' clock, in ns on the monotonic clock: on
// the real clock, r's arrival stamp (Request.Start; the server stamps
// every request, which saves a clock read here), else Nanotime; on
// another Clock (tests), the time since the service started.
func (s *Service) quotaNow(r *Request) int64 {
	switch {
	case !s.realClock:
		return int64(s.cfg.Clock.Now().Sub(s.quotaBase))
	case r.Start != 0:
		return r.Start
	}
	return Nanotime()
}

// takeRate takes r from e's bucket; when it is empty it returns false and
// how long until a request would pass.
func (s *Service) takeRate(e *nsQuota, rate int64, r *Request) (bool, time.Duration) {
	served, groups := s.servedOf()
	burst := e.burst.Load()
	if burst == 0 {
		burst = rate
	}
	burst = s.share(burst)
	// The node's rate is rate × served / groups per second.
	interval := int64(time.Second) * groups / (rate * served)
	tol := int64(math.MaxInt64 / 2) // a burst beyond what int64 ns hold
	if interval == 0 || burst < tol/interval {
		tol = interval * burst
	}
	now := s.quotaNow(r)
	for {
		tat := e.tat.Load()
		next := max(tat, now) + interval
		if next-now > tol {
			return false, time.Duration(next - now - tol)
		}
		if e.tat.CompareAndSwap(tat, next) {
			return true, 0
		}
	}
}

// rateAdmits checks r (an acquire, a state query or a watch reaching its
// master for the first time) against its namespace's rate; over it, it
// answers r OVERLOADED and reports false.
func (w *worker) rateAdmits(r *Request) bool {
	if r.Op == OpAcquire && r.Flags.Has(wire.FlagDowngrade) {
		return true
	}
	e := w.quota.lookup(r.Namespace)
	if e == nil {
		return true
	}
	if ok, retry := w.adm.rateOK(e, r); !ok {
		w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: retry, Msg: msgQuotaRate})
		return false
	}
	return true
}

// renewAdmits charges renewal r of hold h (a copy of the record's, with
// the master's deadline for it, 0 when unknown) to its namespace's rate.
// A renewal is a Paxos write, and one that sets a value is fanned out to
// the key's watchers, so renewals count; but refusing one the hold needs
// would turn the quota into lost locks. So a renewal beyond its need —
// one that sets a value (SetValue), or one sent while more than
// renewNeedFrac of the hold's TTL is left (the Go client renews when a
// third of it has passed) — is refused OVERLOADED over the rate (it
// reports false, having answered r), and any other takes its token
// whatever the bucket holds, so that it slows the namespace's other
// requests instead.
func (w *worker) renewAdmits(r *Request, h *holder, deadline int64) bool {
	e := w.quota.lookup(r.Namespace)
	if e == nil || e.rate.Load() == 0 {
		return true
	}
	beyond := r.SetValue
	if !beyond && deadline != 0 && h.ttlMs > 0 {
		left := w.timeOf(deadline).Sub(w.clock.Now())
		beyond = left > time.Duration(h.ttlMs)*time.Millisecond*renewNeedNum/renewNeedDen
	}
	if !beyond {
		w.adm.chargeRate(e, r)
		return true
	}
	if ok, retry := w.adm.rateOK(e, r); !ok {
		w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: retry, Msg: msgQuotaRate})
		return false
	}
	return true
}

// A renewal sent while more than renewNeedNum/renewNeedDen of its hold's
// TTL is left is beyond the hold's need (see renewAdmits).
const (
	renewNeedNum = 3
	renewNeedDen = 4
)

// chargeRate takes r's token from e's bucket even when it is empty (the
// bucket then refuses the namespace's next requests for longer), and
// counts it admitted. A charge that would close the bucket for more
// than a second (or ten requests' worth, at a rate below 10/s) beyond its
// burst is dropped, so that charges cannot close it for long.
func (s *Service) chargeRate(e *nsQuota, r *Request) {
	rate := e.rate.Load()
	if rate == 0 {
		return
	}
	served, groups := s.servedOf()
	interval := int64(time.Second) * groups / (rate * served)
	now := s.quotaNow(r)
	burst := e.burst.Load()
	if burst == 0 {
		burst = rate
	}
	limit := max(int64(time.Second), 10*interval) + interval*s.share(burst)
	e.admitted.Add(1)
	for {
		tat := e.tat.Load()
		next := max(tat, now) + interval
		if next-now > limit || e.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// rateOK takes request r of e's namespace from its bucket, counting it;
// refused, it returns the RetryAfterMs to answer.
func (s *Service) rateOK(e *nsQuota, r *Request) (bool, uint32) {
	rate := e.rate.Load()
	if rate == 0 {
		return true, 0
	}
	ok, wait := s.takeRate(e, rate, r)
	if ok {
		e.admitted.Add(1)
		return true, 0
	}
	e.refused[QuotaRate].Add(1)
	return false, uint32(max((wait+time.Millisecond-1)/time.Millisecond, 1))
}

// heldOK reports whether namespace ns may have n more holders; refused,
// it counts the refusal.
func (s *Service) heldOK(ns string, n int64) bool {
	e := s.quota.lookup(ns)
	if e == nil {
		return true
	}
	lim := e.held.Load()
	if lim == 0 || !e.counted.Load() || e.heldUse.Load()+n <= lim {
		return true
	}
	e.refused[QuotaHeld].Add(1)
	return false
}

// heldRoom returns how many of n waiters may be granted a key of
// namespace ns by a command that removes gone of its holds and leaves
// rest: as many as the namespace's held quota has room for beside the
// holds the command frees, and at least one when it leaves the key free
// (its queue would otherwise stall with no holder left to free it). The
// waiters left out stay queued, and the key's next release picks again.
func (s *Service) heldRoom(ns string, n, gone, rest int) int {
	e := s.quota.lookup(ns)
	if e == nil {
		return n
	}
	lim := e.held.Load()
	if lim == 0 || !e.counted.Load() {
		return n
	}
	room := max(lim-e.heldUse.Load(), 0) + int64(gone)
	if rest == 0 {
		room = max(room, 1)
	}
	return int(min(room, int64(n)))
}

// heldAdmits checks an acquire that would add a holder (of a free key, a
// reader beside others, a semaphore's new holder) against its
// namespace's held quota; at the limit, it answers r OVERLOADED and
// reports false.
func (w *worker) heldAdmits(r *Request) bool {
	if w.adm.heldOK(r.Namespace, 1) {
		return true
	}
	w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: overloadRetryMs, Msg: msgQuotaHeld})
	return false
}

// multiAdmits checks a multi-acquire, once, against its namespace's rate
// and held quotas (every key counted as a new holder); refused, it
// returns the answer.
func (s *Service) multiAdmits(m *multiAcq) (wire.Response, bool) {
	if m.admitted {
		return wire.Response{}, true
	}
	e := s.quota.lookup(m.req.Namespace)
	if e == nil {
		m.admitted = true
		return wire.Response{}, true
	}
	if ok, retry := s.rateOK(e, m.req); !ok {
		return wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: retry, Msg: msgQuotaRate}, false
	}
	m.admitted = true
	if !s.heldOK(m.req.Namespace, int64(len(m.ents))) {
		return wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: overloadRetryMs, Msg: msgQuotaHeld}, false
	}
	return wire.Response{}, true
}

// waitersQuota returns this node's share of namespace ns's waiters
// quota, 0 for none.
func (s *Service) waitersQuota(ns string) int64 {
	e := s.quota.lookup(ns)
	if e == nil {
		return 0
	}
	lim := e.waiters.Load()
	if lim == 0 {
		return 0
	}
	return s.share(lim)
}

// refusedWaiter counts a blocked acquire refused by ns's waiters quota.
func (s *Service) refusedWaiter(ns string) {
	if e := s.quota.lookup(ns); e != nil {
		e.refused[QuotaWaiters].Add(1)
	}
}

// QuotaUsage is one namespace's quota and what this node counts against
// it.
type QuotaUsage struct {
	Quota Quota
	// Held is the namespace's holders, cluster-wide, as this node's
	// replicas have applied them.
	Held int64
	// Waiters is the namespace's blocked acquires queued on this node's
	// masters.
	Waiters int64
	// NodeWaiters, NodeRate and NodeBurst are this node's shares of the
	// waiters and rate limits (0: unlimited).
	NodeWaiters, NodeRate, NodeBurst int64
	// Admitted counts the requests this node checked against the rate and
	// admitted; Refused the requests refused, by QuotaKind.
	Admitted uint64
	Refused  [NumQuotaKinds]uint64
}

// QuotaUsage returns every namespace with a quota and its use on this
// node (for metrics and the console: read at scrape time).
func (s *Service) QuotaUsage() map[string]QuotaUsage {
	m := s.quota.cur.Load()
	if m == nil {
		return map[string]QuotaUsage{}
	}
	out := make(map[string]QuotaUsage, len(*m))
	for ns, e := range *m {
		u := QuotaUsage{Quota: e.quota(), Held: e.heldUse.Load(), Waiters: int64(s.use.namespace(ns)[useWait]), Admitted: e.admitted.Load()}
		if u.Quota.Waiters > 0 {
			u.NodeWaiters = s.share(u.Quota.Waiters)
		}
		if u.Quota.Rate > 0 {
			served, groups := s.servedOf()
			u.NodeRate = max(u.Quota.Rate*served/groups, 1)
			u.NodeBurst = s.share(cmp.Or(u.Quota.Burst, u.Quota.Rate))
		}
		for k := range u.Refused {
			u.Refused[k] = e.refused[k].Load()
		}
		out[ns] = u
	}
	return out
}
