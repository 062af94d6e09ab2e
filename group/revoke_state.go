package group

import (
	"encoding/binary"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// A revocation is replicated state. An operator's force-unlock is first an
// opRevoke, which marks the hold revoked in the state machine (shard.revoked,
// checkpointed under revokePrefix like a lock-delay record); the hold
// itself stays until its holder releases it (the master then proposes the
// release as an opExpire: an involuntary end, with the hold's lock-delay
// and EventRevoked to watchers) or its deadline passes. Every master reads
// the mark: one elected during a revocation refuses the hold's renewals
// (REVOKED), reports its token not current, ends it as revoked and keeps
// its lock-delay, exactly as the master that revoked it would have. The
// mark ends with the hold: any command that removes the hold drops it.
// Only the operators' requests waiting for the end are the master's alone
// (worker.revoked); told NO_MASTER when it stops serving, they are sent
// again to the next master, which finds the mark and waits with them.

// revMark names a revoked hold of a key: readers granted in one command
// share a token, so the owner is part of it.
type revMark struct {
	owner wire.Owner
	token uint64
}

// revokedRecordVersion is the version byte of a key's revoked-holds
// record.
const revokedRecordVersion = 1

// revoke applies opRevoke: it marks the hold of key (record l) of o with
// token revoked. SUCCESS when it did or the mark was there, LOCK_DELETED
// when the key is free, TOKEN_ERROR when o holds it with another token or
// not at all. Called with s.mu held.
func (s *shard) revoke(key string, l *lockRec, o wire.Owner, token uint64) wire.Status {
	if l.n() == 0 {
		return wire.StatusLockDeleted
	}
	if i := l.find(o); i < 0 || l.at(i).token != token {
		return wire.StatusTokenError
	}
	m := revMark{owner: o, token: token}
	for _, x := range s.revoked[key] {
		if x == m {
			return wire.StatusSuccess
		}
	}
	s.noteRevoked(key)
	if s.revoked == nil {
		s.revoked = make(map[string][]revMark)
	}
	s.revoked[key] = append(s.revoked[key], m)
	return wire.StatusSuccess
}

// pruneRevoked drops the marks of key whose hold l no longer has. Called
// with s.mu held after every change of key.
func (s *shard) pruneRevoked(key string, l *lockRec) {
	ms, ok := s.revoked[key]
	if !ok {
		return
	}
	var keep []revMark
	for _, m := range ms {
		if i := l.find(m.owner); i >= 0 && l.at(i).token == m.token {
			keep = append(keep, m)
		}
	}
	if len(keep) == len(ms) {
		return
	}
	s.noteRevoked(key)
	if len(keep) == 0 {
		delete(s.revoked, key)
	} else {
		s.revoked[key] = keep
	}
}

// dropRevoked forgets every mark of namespace ns (its records are
// dropped). Called with s.mu held.
func (s *shard) dropRevoked(ns string) {
	for key := range s.revoked {
		if splitNS(key) == ns {
			s.noteRevoked(key)
			delete(s.revoked, key)
		}
	}
}

// noteRevoked records that key's marks change, for the next checkpoint.
// Called with s.mu held, before the change.
func (s *shard) noteRevoked(key string) {
	if s.revokedDirty == nil {
		s.revokedDirty = make(map[string]bool)
	}
	if _, ok := s.revokedDirty[key]; !ok {
		_, stored := s.revoked[key]
		s.revokedDirty[key] = stored
	}
}

// checkpointRevoked writes the revoked-holds records changed since the
// last checkpoint into w, and deletes the stored ones that ended. Called
// with s.mu held.
func (sm *StateMachine) checkpointRevoked(s *shard, w paxos.Writer) {
	if len(s.revokedDirty) == 0 {
		return
	}
	for key, stored := range s.revokedDirty {
		sm.key = append(append(sm.key[:0], revokePrefix), key...)
		if ms, ok := s.revoked[key]; ok {
			sm.val = encodeRevoked(sm.val[:0], ms)
			w.Set(sm.key, sm.val)
		} else if stored {
			w.Delete(sm.key)
		}
	}
	s.revokedDirty = nil
	if len(s.revoked) == 0 {
		s.revoked = nil
	}
}

// encodeRevoked encodes a key's marks: version, count, then each mark's
// owner (client, id) and token.
func encodeRevoked(dst []byte, ms []revMark) []byte {
	dst = append(dst, revokedRecordVersion)
	dst = binary.AppendUvarint(dst, uint64(len(ms)))
	for _, m := range ms {
		dst = binary.AppendUvarint(dst, m.owner.Client)
		dst = binary.AppendUvarint(dst, m.owner.ID)
		dst = binary.AppendUvarint(dst, m.token)
	}
	return dst
}

// decodeRevoked decodes what encodeRevoked wrote.
func decodeRevoked(b []byte) ([]revMark, error) {
	r := newReader(b)
	if r.Byte() != revokedRecordVersion {
		return nil, fmt.Errorf("group: revoked-holds record version: %w", errBadCommand)
	}
	n := r.Uvarint()
	if n == 0 || n > uint64(r.Len()) {
		return nil, errBadCommand
	}
	ms := make([]revMark, 0, n)
	for range n {
		var m revMark
		m.owner.Client = r.Uvarint()
		m.owner.ID = r.Uvarint()
		m.token = r.Uvarint()
		ms = append(ms, m)
	}
	if !r.Done() {
		return nil, errBadCommand
	}
	return ms, nil
}

// loadRevoked loads the revoked-holds record of key k[1:] (Load, shards
// locked).
func (sm *StateMachine) loadRevoked(k, v []byte) error {
	ms, err := decodeRevoked(v)
	if err != nil {
		return fmt.Errorf("group: revoked holds of %q: %w", k[1:], err)
	}
	key := string(k[1:])
	s := sm.shardOf(key)
	if s.revoked == nil {
		s.revoked = make(map[string][]revMark)
	}
	s.revoked[key] = ms
	return nil
}

// revokedHold reports whether the state machine marks the hold (key, o,
// token) revoked.
func (sm *StateMachine) revokedHold(key string, o wire.Owner, token uint64) bool {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, m := range s.revoked[key] {
		if m.owner == o && m.token == token {
			return true
		}
	}
	return false
}

// hasRevoked reports whether shard i has a revoked hold.
func (sm *StateMachine) hasRevoked(i int) bool {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.revoked) > 0
}

// forEachRevoked calls f for every mark of shard i under its read lock.
func (sm *StateMachine) forEachRevoked(i int, f func(key string, m revMark)) {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, ms := range s.revoked {
		for _, m := range ms {
			f(k, m)
		}
	}
}

// resetMarks empties the shard's lock-delay and revoked-holds records
// (Load, shard locked).
func (s *shard) resetMarks() {
	s.delays, s.delayDirty = nil, nil
	s.revoked, s.revokedDirty = nil, nil
}

// loadMark loads a lock-delay or revoked-holds record (Load, shards
// locked).
func (sm *StateMachine) loadMark(k, v []byte) error {
	if k[0] == revokePrefix {
		return sm.loadRevoked(k, v)
	}
	return sm.loadDelay(k, v)
}
