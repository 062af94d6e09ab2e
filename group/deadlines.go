package group

import (
	"time"

	"github.com/paxlock/paxlock/wire"
)

// holdTime is the master's clock for one hold, kept by its worker (see
// worker.times), never in the replicated record.
type holdTime struct {
	// rec is the record the hold was in when its deadline was set. A
	// record that is replaced (a move in, a checkpoint loaded) or that
	// went and was made anew holds other holds, even under the same
	// name, so an entry counts only while the key's record is still rec.
	// It is compared, never read outside the shard's lock.
	rec *lockRec
	// at is the hold's deadline in nanoseconds on the worker's monotonic
	// clock (see worker.mono).
	at int64
	// age is how long before at the hold was granted (or this node
	// became master, whichever was later): the master reads the hold's
	// age at release from it, for metrics.
	age time.Duration
}

// holdRec returns key's record if it has owner o's hold with token, and
// that hold's TTL; else nil. The pointer is for holdTime.rec, not to be
// read.
func (sm *StateMachine) holdRec(key string, o wire.Owner, token uint64) (*lockRec, time.Duration) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token {
		return l, time.Duration(l.at(i).ttlMs) * time.Millisecond
	}
	return nil, 0
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

// withRecs calls f with shard i's records under its read lock; f must
// not keep or change the map.
func (sm *StateMachine) withRecs(i int, f func(locks map[string]*lockRec)) {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	f(s.locks)
}

// setDeadline records the master's deadline of owner o's hold with token
// on key, and reports whether that hold exists and the deadline it had (0
// when none).
func (w *worker) setDeadline(key string, o wire.Owner, token uint64, at int64) (prev int64, ok bool) {
	rec, ttl := w.g.sm.holdRec(key, o, token)
	id := holdID{key, o, token}
	if rec == nil {
		delete(w.times, id)
		return 0, false
	}
	t, had := w.times[id]
	if had && t.rec == rec { // renewed (or its expiry retried): granted as long before
		prev = t.at
		t.age += time.Duration(at - prev)
	} else { // granted now, with a deadline of its TTL
		t = holdTime{rec: rec, age: ttl}
	}
	t.at = at
	w.times[id] = t
	return prev, true
}

// deadline returns the master's deadline of owner o's hold with token on
// key (0 when unknown), and whether that hold exists. An entry of a hold
// that is gone is dropped.
func (w *worker) deadline(key string, o wire.Owner, token uint64) (int64, bool) {
	rec, _ := w.g.sm.holdRec(key, o, token)
	id := holdID{key, o, token}
	if rec == nil {
		delete(w.times, id)
		return 0, false
	}
	if t, ok := w.times[id]; ok && t.rec == rec {
		return t.at, true
	}
	return 0, true
}

// deadlineIn returns the master's deadline of hold h of key's record rec
// (under view), 0 when unknown.
func (w *worker) deadlineIn(key string, rec *lockRec, h *holder) int64 {
	if t, ok := w.times[holdID{key, h.owner, h.token}]; ok && t.rec == rec {
		return t.at
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
	rec, _ := w.g.sm.holdRec(key, o, token)
	if t, ok := w.times[holdID{key, o, token}]; ok && rec != nil && t.rec == rec {
		return t.at - int64(t.age), true
	}
	return 0, false
}

// dropDeadline forgets the deadline of a hold that ended.
func (w *worker) dropDeadline(key string, o wire.Owner, token uint64) {
	delete(w.times, holdID{key, o, token})
}

// dropNamespaceDeadlines forgets the deadlines of namespace ns's holds
// (it moved away): their expiry entries, if any are left, no longer match,
// and the records they were set on are not kept alive.
func (w *worker) dropNamespaceDeadlines(ns string) {
	for id := range w.times {
		if splitNS(id.key) == ns {
			delete(w.times, id)
		}
	}
}

// liveDeadlines drops the deadlines of holds that are gone and keeps the
// entries of the expiry heap whose hold still has that deadline, in
// place.
func (w *worker) liveDeadlines() {
	w.g.sm.withRecs(w.idx, func(locks map[string]*lockRec) {
		for id, t := range w.times {
			l := locks[id.key]
			if i := l.find(id.owner); l != t.rec || i < 0 || l.at(i).token != id.token {
				delete(w.times, id)
			}
		}
	})
	es := w.expiry
	out := es[:0]
	for _, e := range es {
		if t, ok := w.times[holdID{e.key, e.owner, e.token}]; ok && t.at == e.at {
			out = append(out, e)
		}
	}
	clear(es[len(out):])
	w.expiry = out
}
