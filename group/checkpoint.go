package group

import (
	"encoding/binary"
	"fmt"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
	"github.com/paxlock/paxlock/wire"
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

// Load implements paxos.StateMachine.
func (sm *StateMachine) Load(r paxos.Reader, applied uint64) error {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for i := range sm.shards {
		sm.shards[i].mu.Lock()
		sm.shards[i].locks = make(map[string]*lockRec)
		sm.shards[i].dirty = make(map[string]bool)
		sm.shards[i].nsKeys = nil
		sm.shards[i].resetMarks()
	}
	sm.dirtyN = 0
	defer func() {
		for i := range sm.shards {
			sm.shards[i].mu.Unlock()
		}
	}()
	sm.version, sm.count, sm.applied = 0, 0, applied
	sm.uncountQuotaHeld()
	sm.nsHeld = nil
	sm.moves, sm.moveDirty = nil, nil
	defer sm.ns.BeginLoad()()
	endQuotas := sm.quotas.BeginLoad()
	defer sm.members.BeginLoad()()
	defer sm.reg.BeginLoad()()
	// Records are gathered per shard first and each shard's map made at
	// its final size: growing the maps one insert at a time cost about a
	// quarter of a restart's Load in table splits.
	recs := make([][]loadedRec, len(sm.shards))
	err := r.Scan(nil, func(k, v []byte) error {
		switch {
		case systable.IsNamespaceKey(k):
			return sm.ns.LoadPair(k, v)
		case systable.IsQuotaKey(k):
			return sm.quotas.LoadPair(k, v)
		case systable.IsMemberKey(k):
			return sm.members.LoadPair(k, v)
		case systable.IsRegistryKey(k):
			return sm.reg.LoadPair(k, v)
		case len(k) > 0 && (k[0] == delayPrefix || k[0] == revokePrefix):
			return sm.loadMark(k, v)
		case len(k) > 0 && k[0] == movePrefix:
			return sm.loadMove(k, v)
		case len(k) > 0 && k[0] == lockPrefix:
			l, err := decodeRec(v)
			if err != nil {
				return fmt.Errorf("group: lock %q: %w", k[1:], err)
			}
			key := string(k[1:])
			i := wire.WorkerOf(hashFull(key), sm.workers)
			recs[i] = append(recs[i], loadedRec{key, l})
			sm.count++
			sm.countNS(key, 1, int64(l.n()))
		case string(k) == string(versionKey):
			v, n := binary.Uvarint(v)
			if n <= 0 {
				return fmt.Errorf("group: version: %w", errBadCommand)
			}
			sm.version = v
		}
		return nil
	})
	sm.install(recs)
	sm.publishGates()
	if endQuotas() {
		sm.quotasChanged() // the refresh it starts waits for the tables' locks
	}
	return err
}

// loadedRec is a lock record Load read, with its key.
type loadedRec struct {
	key string
	l   *lockRec
}

// install makes each shard's lock table of the records Load read for it
// (in key order), at its final size, and indexes them; the shards are
// locked.
func (sm *StateMachine) install(recs [][]loadedRec) {
	for i, rs := range recs {
		m := make(map[string]*lockRec, len(rs))
		for _, x := range rs {
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
