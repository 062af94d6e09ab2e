package group

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// List lists the locks held in namespace ns on lock group g whose keys
// start with prefix and sort after after (byte order), at most limit of
// them, in key order, and calls done once with them — or with ok false
// when this node does not serve g. It does not block: every worker of the
// group lists its own keys when it next runs, between requests, and the
// last one to answer calls done (on its goroutine; done must not block).
//
// A worker scans its shard of the lock table for the prefix: a list costs
// time in proportion to the group's held keys, which is fine for what it
// is for (operators, dashboards), not for a request path.
func (s *Service) List(ns string, g int, prefix, after string, limit int, done func(locks []wire.LockInfo, ok bool)) {
	if g < 0 || g >= len(s.groups) || limit <= 0 {
		done(nil, false)
		return
	}
	lg := s.groups[g]
	q := &listQuery{ns: ns, prefix: prefix, after: after, limit: limit, left: len(lg.workers), done: done}
	for _, w := range lg.workers {
		w.post(event{kind: evList, list: q})
	}
}

// listQuery is one List asked of every worker of a group.
type listQuery struct {
	ns, prefix, after string
	limit             int
	done              func([]wire.LockInfo, bool)

	mu     sync.Mutex
	left   int // workers yet to answer
	got    []wire.LockInfo
	failed bool // a worker did not serve the group
}

// reply is a worker's answer: its first locks in key order, nil if it
// does not serve the group (or was stopped). The last answer calls done.
func (q *listQuery) reply(locks []wire.LockInfo) {
	q.mu.Lock()
	if locks == nil {
		q.failed = true
	}
	q.got = append(q.got, locks...)
	q.left--
	last := q.left == 0
	q.mu.Unlock()
	if !last {
		return
	}
	if q.failed {
		q.done(nil, false)
		return
	}
	slices.SortFunc(q.got, func(a, b wire.LockInfo) int { return strings.Compare(a.Key, b.Key) })
	q.done(q.got[:min(q.limit, len(q.got))], true)
}

// listLocks is a worker's part of a List (evList): its shard's matching
// keys, first q.limit of them in key order, with their holder (the first
// reader of a read lock), TTL left as this master measures it, and live
// waiters. It returns nil when the worker does not serve the group.
func (w *worker) listLocks(q *listQuery) []wire.LockInfo {
	if !w.serving || !w.g.leaseValid() {
		return nil
	}
	from := fullKey(q.ns, q.prefix)
	after := fullKey(q.ns, q.after)
	sh := &w.g.sm.shards[w.idx]
	var keys []string
	sh.mu.RLock()
	for k := range sh.locks {
		if strings.HasPrefix(k, from) && (q.after == "" || k > after) {
			keys = append(keys, k)
		}
	}
	sh.mu.RUnlock()
	slices.Sort(keys)
	keys = keys[:min(q.limit, len(keys))]
	out := make([]wire.LockInfo, 0, len(keys))
	now := w.clock.Now()
	for _, k := range keys {
		rec := w.g.sm.get(k)
		if rec.n() == 0 {
			continue
		}
		h := rec.at(0)
		_, name := splitFull(k)
		li := wire.LockInfo{Key: name, Holder: h.owner, Token: h.token, Kind: rec.kind(), TTLLeftMs: h.ttlMs, Value: rec.value(0)}
		if h.deadline != 0 {
			li.TTLLeftMs = uint32(max(w.timeOf(h.deadline).Sub(now), 0) / time.Millisecond)
		}
		if rec.kind() == wire.KindRead {
			li.Readers = uint32(rec.n())
		}
		if isSem(rec) {
			li.Readers, li.Limit = uint32(rec.n()), rec.limit()
			li.Permits = uint32(min(rec.inUse(wire.Owner{}, 0), 1<<32-1))
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
	return out
}
