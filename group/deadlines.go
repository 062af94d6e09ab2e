package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// holdRec returns the stamp (lockRec.gen) of key's record if it has
// owner o's hold with token, and that hold's TTL and maximum hold time;
// else 0.
func (sm *StateMachine) holdRec(key string, o wire.Owner, token uint64) (uint32, time.Duration, time.Duration) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token {
		return l.gen, time.Duration(l.at(i).ttlMs) * time.Millisecond, time.Duration(l.maxHoldAt(i)) * time.Millisecond
	}
	return 0, 0, 0
}

// forEach calls f for every record of shard i under its read lock.
func (sm *StateMachine) forEach(i int, f func(key string, l *lockRec)) {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, l := range s.locks {
		f(k, l)
	}
}

// setDeadline records the master's deadline of owner o's hold with token
// on key, with sink as whom to tell when it is lost, and reports whether
// that hold exists and the deadline it had (0 when none). The deadline is
// capped at the hold's limit (see maxhold.go), counted from the moment
// the slot is made: the grant, or this node's takeover.
func (w *worker) setDeadline(key string, o wire.Owner, token uint64, at int64, sink *sinkRef) (prev int64, ok bool) {
	gen, ttl, maxHold := w.g.sm.holdRec(key, o, token)
	t := &w.times
	i := t.find(key, o, token)
	if gen == 0 {
		if i >= 0 {
			t.drop(i)
		}
		return 0, false
	}
	switch {
	case i < 0:
		i = t.add(key, gen, o, token)
		t.slots[i].start = at - int64(ttl)
		t.slots[i].bound = holdBound(ttl, maxHold)
	case t.slots[i].gen == gen: // renewed (or its expiry retried): granted when it was
		prev = t.slots[i].at
	default: // a hold of a record that went: granted now, with a deadline of its TTL
		s := &t.slots[i]
		s.gen, s.start = gen, at-int64(ttl)
		s.bound = holdBound(ttl, maxHold)
	}
	t.setConn(i, sink)
	t.setAt(i, capDeadline(&t.slots[i], at))
	return prev, true
}

// retryDeadline moves the pending expiry of the hold (key, o, token) to
// at, past its limit if need be: the expiry is retried, not the hold
// extended.
func (w *worker) retryDeadline(key string, o wire.Owner, token uint64, at int64, sink *sinkRef) {
	if gen, _, _ := w.g.sm.holdRec(key, o, token); gen == 0 {
		w.times.dropHold(key, o, token)
		return
	}
	i := w.times.find(key, o, token)
	if i < 0 {
		return
	}
	w.times.setConn(i, sink)
	w.times.setAt(i, at)
}

// deadline returns the master's deadline of owner o's hold with token on
// key (0 when unknown), and whether that hold exists. A slot of a hold
// that is gone, or of a record that went, is dropped.
func (w *worker) deadline(key string, o wire.Owner, token uint64) (int64, bool) {
	gen, _, _ := w.g.sm.holdRec(key, o, token)
	t := &w.times
	i := t.find(key, o, token)
	if i >= 0 && t.slots[i].gen != gen {
		t.drop(i)
		i = -1
	}
	if gen == 0 {
		return 0, false
	}
	if i >= 0 {
		return t.slots[i].at, true
	}
	return 0, true
}

// deadlineIn returns the master's deadline of hold h of key's record rec
// (under view), 0 when unknown.
func (w *worker) deadlineIn(key string, rec *lockRec, h *holder) int64 {
	if s := w.times.get(key, rec.gen, h.owner, h.token); s != nil {
		return s.at
	}
	return 0
}

// ttlLeft returns how many milliseconds are left to hold i of key's
// record rec (under view) at now: its TTL when its deadline is unknown.
func (w *worker) ttlLeft(key string, rec *lockRec, i int, now time.Time) uint32 {
	h := rec.at(i)
	if dl := w.deadlineIn(key, rec, h); dl != 0 {
		return uint32(max(w.timeOf(dl).Sub(now), 0) / time.Millisecond)
	}
	return h.ttlMs
}

// grantedAt returns when, on the worker's monotonic clock, owner o's hold
// with token on key was granted (or this node became master, whichever
// was later), and whether that is known.
func (w *worker) grantedAt(key string, o wire.Owner, token uint64) (int64, bool) {
	gen, _, _ := w.g.sm.holdRec(key, o, token)
	if gen == 0 {
		return 0, false
	}
	if s := w.times.get(key, gen, o, token); s != nil {
		return s.start, true
	}
	return 0, false
}

// dropDeadline forgets the deadline of a hold that ended.
func (w *worker) dropDeadline(key string, o wire.Owner, token uint64) {
	w.times.dropHold(key, o, token)
}

// dropNamespaceDeadlines forgets the deadlines of namespace ns's holds
// (it moved away): their slots leave the expiry heap.
func (w *worker) dropNamespaceDeadlines(ns string) {
	var keys []string // keyOf's: valid across the drops' compactions
	w.times.each(func(_ *holdSlot, key string) {
		if splitNS(key) == ns {
			keys = append(keys, key)
		}
	})
	for _, key := range keys {
		w.times.dropKey(key)
	}
}

// isCurrent reports whether slot s, of key, is of a hold its key's
// record still has (read-only: for scans over the slots).
func (w *worker) isCurrent(s *holdSlot, key string) bool {
	gen, _, _ := w.g.sm.holdRec(key, s.owner, s.token)
	return gen != 0 && gen == s.gen
}
