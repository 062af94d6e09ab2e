package group

import (
	"time"

	"github.com/paxlock/paxlock/wire"
)

// setDeadline records the master's deadline of owner o's hold with token
// on key, and reports whether that hold exists and the deadline it had.
func (sm *StateMachine) setDeadline(key string, o wire.Owner, token uint64, at int64) (prev int64, ok bool) {
	s := sm.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token {
		h := l.at(i)
		prev, h.deadline = h.deadline, at
		if prev == 0 { // granted now, with a deadline of its TTL
			h.age = encodeHeld(time.Duration(h.ttlMs) * time.Millisecond)
		} else { // renewed (or its expiry retried): granted as long before
			h.age = encodeHeld(h.age.duration() + time.Duration(at-prev))
		}
		return prev, true
	}
	return 0, false
}

// grantedAt returns when, on the worker's monotonic clock, owner o's hold
// with token on key was granted (or this node became master, whichever
// was later), and whether that is known.
func (sm *StateMachine) grantedAt(key string, o wire.Owner, token uint64) (int64, bool) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token && l.at(i).deadline != 0 {
		return l.at(i).deadline - int64(l.at(i).age.duration()), true
	}
	return 0, false
}

// liveDeadlines keeps the entries of es (all of shard i) whose hold still
// has that deadline, in place, and returns them.
func (sm *StateMachine) liveDeadlines(i int, es []expiry) []expiry {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := es[:0]
	for _, e := range es {
		l := s.locks[e.key]
		if j := l.find(e.owner); j >= 0 && l.at(j).token == e.token && l.at(j).deadline == e.at {
			out = append(out, e)
		}
	}
	clear(es[len(out):])
	return out
}

// deadline returns the master's deadline of owner o's hold with token on
// key (0 when unknown), and whether that hold exists.
func (sm *StateMachine) deadline(key string, o wire.Owner, token uint64) (int64, bool) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token {
		return l.at(i).deadline, true
	}
	return 0, false
}

// forEachMut calls f for every record of shard i under its write lock; f
// may change the holds' master-only deadlines, nothing else.
func (sm *StateMachine) forEachMut(i int, f func(key string, l *lockRec)) {
	s := &sm.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, l := range s.locks {
		f(k, l)
	}
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
