package group

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// List lists the locks held in namespace ns on lock group g whose keys
// start with prefix and sort after after (byte order), at most limit of
// them, in key order, and calls done once with the answer: SUCCESS with
// the locks (More set when the page stopped short of limit to stay
// within listReplyBytes), NO_MASTER when this node does not serve g, or
// OVERLOADED over the namespace's rate quota. It does not block: every
// worker of the group lists its own keys when it next runs, between
// requests, and the last one to answer calls done (on its goroutine; done
// must not block).
//
// A worker walks its shard's index of the namespace's keys (nsindex.go)
// from the prefix or the cursor after, and stops after limit keys: a list
// costs time in proportion to its page, whatever the namespace's
// neighbours hold. The cursor is a key, not a position, so a client
// paging with after = its last key neither skips nor repeats a key held
// throughout, whatever is taken or freed between its pages. A list counts
// against the namespace's rate as one request per wire.DefaultListLimit
// of the keys its workers visited (listAdmits).
func (s *Service) List(ns string, g ID, prefix, after string, limit int, done func(wire.Response)) {
	if g < 0 || int(g) >= len(s.groups) || limit <= 0 {
		done(noMaster)
		return
	}
	e := s.quota.lookup(ns)
	if e != nil {
		if ok, retry := s.rateOK(e, &Request{}); !ok {
			done(wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: retry, Msg: msgQuotaRate})
			return
		}
	}
	lg := s.groups[g]
	q := &listQuery{svc: s, quota: e, ns: ns, prefix: prefix, after: after, limit: limit, left: len(lg.workers), done: done}
	for _, w := range lg.workers {
		w.post(event{kind: evList, list: q})
	}
}

// listReplyBytes bounds the encoded size of a List answer's locks, well
// under the 1 MiB frame limit (wire.DefaultMaxFrame) a client reads: a
// thousand locks with 1 KiB values would not fit in it.
const listReplyBytes = wire.DefaultMaxFrame / 2

// lockInfoBytes is a bound on the encoded size of l (its key and value,
// and 64 bytes for its numbers and headers).
func lockInfoBytes(l *wire.LockInfo) int { return len(l.Key) + len(l.Value) + 64 }

// listQuery is one List asked of every worker of a group.
type listQuery struct {
	svc               *Service
	quota             *nsQuota // the namespace's quota entry, nil if none
	ns, prefix, after string
	limit             int
	done              func(wire.Response)

	mu      sync.Mutex
	left    int // workers yet to answer
	got     []wire.LockInfo
	scanned int  // keys the workers visited, for the rate (listAdmits)
	failed  bool // a worker did not serve the group
}

// reply is a worker's answer: its first locks in key order, nil if it
// does not serve the group (or was stopped), and the keys it visited. The
// last answer calls done.
func (q *listQuery) reply(locks []wire.LockInfo, scanned int) {
	q.mu.Lock()
	if locks == nil {
		q.failed = true
	}
	q.got = append(q.got, locks...)
	q.scanned += scanned
	q.left--
	last := q.left == 0
	q.mu.Unlock()
	if !last {
		return
	}
	if q.failed {
		q.done(noMaster)
		return
	}
	q.svc.listAdmits(q.quota, q.scanned)
	slices.SortFunc(q.got, func(a, b wire.LockInfo) int { return strings.Compare(a.Key, b.Key) })
	page := q.got[:min(q.limit, len(q.got))]
	size := 0
	for i := range page {
		if size += lockInfoBytes(&page[i]); size > listReplyBytes {
			q.done(wire.Response{Status: wire.StatusSuccess, Locks: page[:i], More: true})
			return
		}
	}
	q.done(wire.Response{Status: wire.StatusSuccess, Locks: page})
}

// listAdmits charges a List that visited n keys to its namespace's rate
// (e; nil: no quota): one request per wire.DefaultListLimit keys or part
// of it beyond the first, which List took before it started. The list is
// answered (its cost is spent); the charge slows the namespace's next
// requests.
func (s *Service) listAdmits(e *nsQuota, n int) {
	if e == nil {
		return
	}
	for range (n - 1) / wire.DefaultListLimit {
		s.chargeRate(e, &Request{})
	}
}

// listLocks is a worker's part of a List (evList): its shard's first
// q.limit keys of the namespace under the prefix after the cursor, in key
// order, with their holder (the first reader of a read lock), TTL left as
// this master measures it, and live waiters, and how many keys it visited.
// It returns nil when the worker does not serve the group.
func (w *worker) listLocks(q *listQuery) ([]wire.LockInfo, int) {
	if !w.serving || !w.g.leaseValid() {
		return nil, 0
	}
	keys, scanned := w.g.sm.listKeys(w.idx, q.ns, q.prefix, q.after, q.limit)
	out := make([]wire.LockInfo, 0, len(keys))
	now := w.clock.Now()
	for _, k := range keys {
		var li wire.LockInfo
		held := false
		w.g.sm.view(k, func(rec *lockRec) { li, held = w.lockInfo(k, rec, now) })
		if !held {
			continue
		}
		if ks := w.keys[k]; ks != nil {
			for _, wq := range ks.waiters {
				if !wq.gone {
					li.QueueLen++
				}
			}
		}
		out = append(out, li)
	}
	return out, scanned
}

// lockInfo is what a listing says of key k's record rec (under view), and
// whether it is held.
func (w *worker) lockInfo(k string, rec *lockRec, now time.Time) (wire.LockInfo, bool) {
	if rec.n() == 0 {
		return wire.LockInfo{}, false
	}
	h := rec.at(0)
	_, name := splitFull(k)
	li := wire.LockInfo{Key: name, Holder: h.owner, Token: h.token, Kind: rec.kind(), TTLLeftMs: w.ttlLeft(k, rec, 0, now), Value: rec.value(0)}
	if rec.kind() == wire.KindRead {
		li.Readers = uint32(rec.n())
	}
	if isSem(rec) {
		li.Readers, li.Limit = uint32(rec.n()), rec.limit()
		li.Permits = uint32(min(rec.inUse(wire.Owner{}, 0), 1<<32-1))
	}
	return li, true
}

// listKeys returns shard i's first limit full keys of namespace ns whose
// names start with prefix and sort after after ("": from the first), in
// order, and how many keys it visited for them (what the rate charges).
func (sm *StateMachine) listKeys(i int, ns, prefix, after string, limit int) ([]string, int) {
	from := fullKey(ns, prefix)
	if after != "" {
		after = fullKey(ns, after)
	}
	sh := &sm.shards[i]
	keys := make([]string, 0, min(limit, listPrealloc))
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	scanned := sh.scanNS(ns, from, after, func(k string) bool {
		keys = append(keys, k)
		return len(keys) < limit
	})
	return keys, scanned
}

// listPrealloc bounds the keys a worker's part of a List allocates room
// for before it knows how many there are.
const listPrealloc = 256
