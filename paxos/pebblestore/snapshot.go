package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/paxlock/paxlock/paxos"
)

// storeSnapshot is the Store's SnapshotSource: a consistent image of one
// group's state-machine keyspace and applied instance, taken when it was
// opened. Each chunk holds whole pairs, each encoded as uvarint len(key) |
// key | uvarint len(value) | value.
type storeSnapshot struct {
	g         paxos.GroupID
	snap      *pebble.Snapshot
	it        *pebble.Iterator
	applied   uint64
	chunkSize int
	buf       []byte
	valid     bool // it is positioned on a pair not yet sent
	done      bool
	closed    bool
}

// OpenSnapshot opens a snapshot of group g for streaming in chunks of at
// most chunkSize bytes (a single pair larger than that gets a chunk of its
// own). It fails if g has an unfinished install. Close it when done: an open
// snapshot pins old data in Pebble.
func (s *Store) OpenSnapshot(g paxos.GroupID, chunkSize int) (paxos.SnapshotSource, error) {
	if chunkSize <= 0 {
		return nil, fmt.Errorf("paxos: group %d snapshot: chunk size %d", g, chunkSize)
	}
	snap := s.db.NewSnapshot()
	ss := &storeSnapshot{g: g, snap: snap, chunkSize: chunkSize}
	restoring, err := storeGet(snap, restoringKey(g), func([]byte) error { return nil })
	if err == nil && restoring {
		err = errors.New("state machine is being restored")
	}
	if err == nil {
		ss.applied, err = storeGetU64(snap, appliedKey(g), "applied", 0)
	}
	if err == nil {
		ss.it, err = snap.NewIter(&pebble.IterOptions{
			LowerBound: appendPrefix(nil, g, kindSM),
			UpperBound: kindEnd(g, kindSM),
		})
	}
	if err != nil {
		_ = ss.Close()
		return nil, fmt.Errorf("paxos: group %d open snapshot: %w", g, err)
	}
	ss.valid = ss.it.First()
	return ss, nil
}

// Applied returns the instance the snapshot reflects.
func (ss *storeSnapshot) Applied() uint64 { return ss.applied }

// Next returns the next chunk; last is true on the final one (which may be
// empty when the keyspace is). chunk is valid until the next call. After the
// last chunk it returns (nil, true, nil).
func (ss *storeSnapshot) Next() (chunk []byte, last bool, err error) {
	if ss.closed {
		return nil, false, fmt.Errorf("paxos: group %d snapshot: closed", ss.g)
	}
	if ss.done {
		return nil, true, nil
	}
	ss.buf = ss.buf[:0]
	for ss.valid {
		k := ss.it.Key()[prefixLen:]
		v, err := ss.it.ValueAndErr()
		if err != nil {
			return nil, false, fmt.Errorf("paxos: group %d snapshot: %w", ss.g, err)
		}
		n := uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(v))) + len(v)
		if len(ss.buf) > 0 && len(ss.buf)+n > ss.chunkSize {
			return ss.buf, false, nil
		}
		ss.buf = binary.AppendUvarint(ss.buf, uint64(len(k)))
		ss.buf = append(ss.buf, k...)
		ss.buf = binary.AppendUvarint(ss.buf, uint64(len(v)))
		ss.buf = append(ss.buf, v...)
		ss.valid = ss.it.Next()
	}
	if err := ss.it.Error(); err != nil {
		return nil, false, fmt.Errorf("paxos: group %d snapshot: %w", ss.g, err)
	}
	ss.done = true
	return ss.buf, true, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Close releases the snapshot. It is safe to call more than once.
func (ss *storeSnapshot) Close() error {
	if ss.closed {
		return nil
	}
	ss.closed = true
	var err error
	if ss.it != nil {
		err = ss.it.Close()
	}
	if cerr := ss.snap.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("paxos: group %d close snapshot: %w", ss.g, err)
	}
	return nil
}

// ---- snapshots: the receiving side ----

// storeInstall is the Store's SnapshotInstall: it replaces one group's
// state-machine keyspace with a snapshot streamed from another replica.
// From BeginInstall until Finish the group is durably marked Restoring, so
// a crash in between is detected at restart (GroupState.Restoring) rather
// than leaving a half-installed state machine that looks valid.
type storeInstall struct {
	s    *Store
	g    paxos.GroupID
	b    *pebble.Batch
	done bool
}

// BeginInstall durably marks group g Restoring and clears its state-machine
// keyspace.
func (s *Store) BeginInstall(g paxos.GroupID) (paxos.SnapshotInstall, error) {
	b := s.db.NewBatch()
	err := b.Set(restoringKey(g), []byte{1}, nil)
	if err == nil {
		err = b.DeleteRange(appendPrefix(nil, g, kindSM), kindEnd(g, kindSM), nil)
	}
	if err == nil {
		err = s.commitSync(b)
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("paxos: group %d begin snapshot install: %w", g, err)
	}
	b.Reset()
	return &storeInstall{s: s, g: g, b: b}, nil
}

// AddChunk writes one chunk's pairs (not synced; Finish syncs). A malformed
// chunk writes nothing and returns an error wrapping ErrCorrupt.
func (si *storeInstall) AddChunk(chunk []byte) error {
	if si.done {
		return fmt.Errorf("paxos: group %d snapshot install: already finished", si.g)
	}
	var key []byte
	err := paxos.DecodeChunk(chunk, func(k, v []byte) error {
		key = appendSMKey(key[:0], si.g, k)
		return si.b.Set(key, v, nil)
	})
	if err != nil {
		si.b.Reset()
		return fmt.Errorf("paxos: group %d snapshot chunk: %w", si.g, err)
	}
	err = si.s.write(si.b, false)
	if err != nil {
		_ = si.b.Close()
		si.b = si.s.db.NewBatch()
	} else {
		si.b.Reset()
	}
	if err != nil {
		return fmt.Errorf("paxos: group %d snapshot chunk: %w", si.g, err)
	}
	return nil
}

// Finish completes the install of a snapshot taken at instance applied: it
// sets Applied = applied and Hard.Committed = max(old, applied), deletes the
// log below applied+1, sets LogStart = applied+1 (or keeps a higher one, so
// LogStart never claims entries that were truncated), and clears Restoring,
// all in one Sync commit.
func (si *storeInstall) Finish(applied uint64) error {
	if si.done {
		return fmt.Errorf("paxos: group %d snapshot install: already finished", si.g)
	}
	if applied == math.MaxUint64 {
		return fmt.Errorf("paxos: group %d snapshot install: applied %d out of range", si.g, applied)
	}
	st, err := si.s.LoadGroup(si.g)
	if err != nil {
		return err
	}
	hs := st.Hard
	hs.Committed = max(hs.Committed, applied)
	b := si.b
	b.Reset()
	g := si.g
	err = errors.Join(
		b.Set(appliedKey(g), binary.BigEndian.AppendUint64(nil, applied), nil),
		b.Set(hardKey(g), paxos.AppendHardState(nil, hs), nil),
		b.DeleteRange(appendLogKey(nil, g, 0), appendLogKey(nil, g, applied+1), nil),
		b.Set(logStartKey(g), binary.BigEndian.AppendUint64(nil, max(applied+1, st.LogStart)), nil),
		b.Delete(restoringKey(g), nil),
	)
	if err == nil {
		err = si.s.commitSync(b)
	}
	si.done = true
	_ = b.Close()
	if err != nil {
		return fmt.Errorf("paxos: group %d finish snapshot install: %w", g, err)
	}
	return nil
}

// Abort abandons the install. The group stays Restoring (durably), its
// state-machine keyspace partial; a new BeginInstall must follow. It is safe
// to call after Finish, and more than once.
func (si *storeInstall) Abort() error {
	if si.done {
		return nil
	}
	si.done = true
	if err := si.b.Close(); err != nil {
		return fmt.Errorf("paxos: group %d abort snapshot install: %w", si.g, err)
	}
	return nil
}
