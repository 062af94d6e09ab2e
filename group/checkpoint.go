package group

import (
	"encoding/binary"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// checkpointKeys is how many dirty keys make a checkpoint due before the
// runtime's own interval: it bounds the dirty maps' memory and the
// records a restart finds only in the log.
const checkpointKeys = 8192

// CheckpointDue implements paxos.Checkpointer.
func (sm *StateMachine) CheckpointDue() bool {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.dirtyN >= checkpointKeys
}

// Checkpoint implements paxos.Checkpointer: it writes the record of every
// key changed since the last checkpoint that is held now, and deletes the
// stored record of every such key that is free now.
func (sm *StateMachine) Checkpoint(w paxos.Writer) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for i := range sm.shards {
		s := &sm.shards[i]
		s.mu.Lock()
		for key, stored := range s.dirty {
			sm.key = append(append(sm.key[:0], lockPrefix), key...)
			if l := s.locks[key]; l.n() > 0 {
				sm.val = encodeRec(sm.val[:0], l)
				w.Set(sm.key, sm.val)
			} else if stored {
				w.Delete(sm.key)
			}
		}
		if len(s.dirty) > checkpointKeys/len(sm.shards) {
			s.dirty = make(map[string]bool) // let a burst's buckets go
		} else {
			clear(s.dirty)
		}
		sm.checkpointDelays(s, w)
		sm.checkpointRevoked(s, w)
		s.mu.Unlock()
	}
	sm.checkpointMoves(w)
	sm.dirtyN = 0
}

// Load implements paxos.StateMachine. It is a multiplexer: the lock table
// (lockLoad) and each of group 0's system tables (systemTables) claims its
// keys and loads its own records.
func (sm *StateMachine) Load(r paxos.Reader, applied uint64) error {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	lt := sm.beginLockLoad(applied)
	defer lt.end()
	tables := sm.systemTables()
	for _, t := range tables {
		defer t.BeginLoad()()
	}
	err := r.Scan(nil, func(k, v []byte) error {
		if lt.claims(k) { // first: the bulk of the records
			return lt.pair(k, v)
		}
		for _, t := range tables {
			if t.Claims(k) {
				return t.LoadPair(k, v)
			}
		}
		return nil // a newer state machine's key: kept, not read
	})
	lt.install()
	sm.moves.Publish()
	return err
}

// lockLoad is a load of the lock table's own records under way (lock
// records, lock-delays, revoked holds, move records, the group version)
// with sm.mu and every shard locked. Lock records are gathered per shard
// first and each shard's map made at its final size: growing the maps one
// insert at a time cost about a quarter of a restart's Load in table
// splits.
type lockLoad struct {
	sm   *StateMachine
	recs [][]loadedRec
}

// beginLockLoad empties the lock table for a load, its shards locked
// until end; sm.mu is held.
func (sm *StateMachine) beginLockLoad(applied uint64) *lockLoad {
	for i := range sm.shards {
		sm.shards[i].mu.Lock()
		sm.shards[i].locks = make(map[string]*lockRec)
		sm.shards[i].dirty = make(map[string]bool)
		sm.shards[i].nsKeys = nil
		sm.shards[i].resetMarks()
	}
	sm.dirtyN = 0
	sm.version, sm.count, sm.applied = 0, 0, applied
	sm.uncountQuotaHeld()
	sm.nsHeld = nil
	sm.moves.Reset()
	return &lockLoad{sm: sm, recs: make([][]loadedRec, len(sm.shards))}
}

// end unlocks the shards.
func (l *lockLoad) end() {
	for i := range l.sm.shards {
		l.sm.shards[i].mu.Unlock()
	}
}

// claims reports whether k is one of the lock table's keys: a lock,
// lock-delay, revoked-holds or move record, or the group version.
func (l *lockLoad) claims(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	switch k[0] {
	case lockPrefix, delayPrefix, revokePrefix:
		return true
	}
	return systable.IsMoveKey(k) || string(k) == string(versionKey)
}

// pair reads one of the lock table's pairs (claims).
func (l *lockLoad) pair(k, v []byte) error {
	sm := l.sm
	switch {
	case k[0] == delayPrefix || k[0] == revokePrefix:
		return sm.loadMark(k, v)
	case systable.IsMoveKey(k):
		return sm.moves.LoadPair(k, v)
	case k[0] == lockPrefix:
		rec, err := decodeRec(v)
		if err != nil {
			return fmt.Errorf("group: lock %q: %w", k[1:], err)
		}
		key := string(k[1:])
		i := wire.WorkerOf(hashFull(key), sm.workers)
		l.recs[i] = append(l.recs[i], loadedRec{key, rec})
		sm.count++
		sm.countNS(key, 1, int64(rec.n()))
	case string(k) == string(versionKey):
		v, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("group: version: %w", errBadCommand)
		}
		sm.version = v
	}
	return nil
}

// loadedRec is a lock record Load read, with its key.
type loadedRec struct {
	key string
	l   *lockRec
}

// install makes each shard's lock table of the records read for it (in
// key order), at its final size, and indexes them.
func (l *lockLoad) install() {
	sm, recs := l.sm, l.recs
	for i, rs := range recs {
		m := make(map[string]*lockRec, len(rs))
		for _, x := range rs {
			sm.shards[i].stamp(x.l)
			m[x.key] = x.l
		}
		// The scan is in key order: indexed backwards, the B-tree's
		// splits leave full nodes of tight capacity behind (forwards,
		// half-full ones of double capacity: BenchmarkNSIndexMemory).
		for j := len(rs) - 1; j >= 0; j-- {
			sm.shards[i].index(rs[j].key)
		}
		sm.shards[i].locks = m
		recs[i] = nil
	}
}
