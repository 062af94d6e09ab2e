package pebblestore

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/paxlock/paxlock/paxos"
)

// storeBatch is the Store's Batch: a Pebble batch.
type storeBatch struct {
	s   *Store
	b   *pebble.Batch
	key []byte
	val []byte
	err error // first error from Pebble, returned by Commit
	sm  map[paxos.GroupID]*smWriter
	// applied says Apply handed b to Pebble and SyncWait has not yet run.
	applied bool
}

// batchRetained is the largest buffer a batch keeps for its next use
// once committed; a larger round's buffer goes back to the garbage
// collector. A round at 256 outstanding commands is tens of KiB; Pebble's
// default (1 MiB) let each batch the host keeps hold up to that after a
// burst, for good.
const batchRetained = 256 << 10

// NewBatch returns an empty batch. Close it when done.
func (s *Store) NewBatch() paxos.Batch {
	return &storeBatch{s: s, b: s.newBatch()}
}

func (s *Store) newBatch() *pebble.Batch {
	return s.db.NewBatch(pebble.WithMaxRetainedSizeBytes(batchRetained))
}

func (b *storeBatch) note(err error) {
	if err != nil && b.err == nil {
		b.err = err
	}
}

func (b *storeBatch) set(key, val []byte) { b.note(b.b.Set(key, val, nil)) }

// SetHardState records group g's hard state.
func (b *storeBatch) SetHardState(g paxos.GroupID, hs paxos.HardState) {
	b.key = appendPrefix(b.key[:0], g, kindHardState)
	b.val = paxos.AppendHardState(b.val[:0], hs)
	b.set(b.key, b.val)
}

// PutEntry stores e in group g's log under e.Instance, replacing any entry
// there.
func (b *storeBatch) PutEntry(g paxos.GroupID, e *paxos.Entry) {
	b.key = appendLogKey(b.key[:0], g, e.Instance)
	b.val = paxos.AppendEntry(b.val[:0], e)
	b.set(b.key, b.val)
}

// SetApplied records the last instance whose commands group g's
// state-machine keyspace reflects; commit it with those writes.
func (b *storeBatch) SetApplied(g paxos.GroupID, inst uint64) {
	b.key = appendPrefix(b.key[:0], g, kindApplied)
	b.val = binary.BigEndian.AppendUint64(b.val[:0], inst)
	b.set(b.key, b.val)
}

// SM returns a Writer into group g's state-machine keyspace that adds its
// writes to b.
func (b *storeBatch) SM(g paxos.GroupID) paxos.Writer {
	if w, ok := b.sm[g]; ok {
		return w
	}
	if b.sm == nil {
		b.sm = make(map[paxos.GroupID]*smWriter)
	}
	w := &smWriter{b: b, g: g}
	b.sm[g] = w
	return w
}

type smWriter struct {
	b *storeBatch
	g paxos.GroupID
}

func (w *smWriter) Set(key, value []byte) {
	w.b.key = appendSMKey(w.b.key[:0], w.g, key)
	w.b.set(w.b.key, value)
}

func (w *smWriter) Delete(key []byte) {
	w.b.key = appendSMKey(w.b.key[:0], w.g, key)
	w.b.note(w.b.b.Delete(w.b.key, nil))
}

// Empty reports whether b holds no writes.
func (b *storeBatch) Empty() bool { return b.b.Empty() }

// Commit applies b atomically. With sync, it returns only once the writes
// (and every write committed before them) are durable; concurrent Sync
// commits share one fsync. An empty batch commits nothing, but with sync it
// still waits for earlier commits to be durable. Whatever the outcome, b is
// then empty and reusable.
func (b *storeBatch) Commit(sync bool) error {
	err := b.err
	b.err = nil
	if err != nil {
		b.b.Reset()
		return fmt.Errorf("paxos: batch: %w", b.s.h.fail(err))
	}
	if b.b.Empty() {
		if sync {
			return b.s.Sync()
		}
		return nil
	}
	if sync {
		err = b.s.commitSync(b.b)
	} else {
		err = b.s.write(b.b, false)
	}
	if err != nil {
		// Pebble refuses to reuse a batch whose commit failed; the
		// commit's error is the one that matters.
		_ = b.b.Close()
		b.b = b.s.newBatch()
		return fmt.Errorf("paxos: commit batch: %w", err)
	}
	b.b.Reset()
	return nil
}

// Apply applies b and starts making it durable without waiting: its writes
// are visible at once, and SyncWait returns once they (and every write
// applied before them) are durable. Concurrent syncs share one fsync.
// After Apply, b may not be written to or committed again until SyncWait
// returned; then it is empty and reusable.
//
// This is Pebble's ApplyNoSyncWait (marked experimental; CockroachDB's raft
// log writes use it the same way): the host loop builds and sends the next
// round while this one's fsync runs, instead of sleeping through it.
func (b *storeBatch) Apply() error {
	err := b.err
	b.err = nil
	if err != nil {
		b.b.Reset()
		return fmt.Errorf("paxos: batch: %w", b.s.h.fail(err))
	}
	if err := b.s.write(b.b, true); err != nil {
		_ = b.b.Close() // the write's error is the one that matters
		b.b = b.s.newBatch()
		return fmt.Errorf("paxos: apply batch: %w", err)
	}
	b.applied = true
	return nil
}

// SyncWait waits until the writes of the last Apply are durable, then
// empties b for reuse. Without an Apply it returns at once.
func (b *storeBatch) SyncWait() error {
	if !b.applied {
		return nil
	}
	b.applied = false
	if err := b.s.syncWait(b.b); err != nil {
		// Pebble refuses to reuse a batch whose commit failed; the
		// commit's error is the one that matters.
		_ = b.b.Close()
		b.b = b.s.newBatch()
		return fmt.Errorf("paxos: sync batch: %w", err)
	}
	b.b.Reset()
	return nil
}

// Close releases b without committing what it holds.
func (b *storeBatch) Close() {
	if b.applied {
		_ = b.SyncWait()
	}
	if b.b != nil {
		_ = b.b.Close()
		b.b = nil
	}
}

// ---- truncation ----

// TruncateLog deletes group g's log entries below `before` and records
// LogStart = before. It refuses to go past Applied+1 or while a snapshot
// install is unfinished, so the state machine never depends on a deleted
// entry; and it first makes every earlier commit (the applied state)
// durable. It does nothing if before <= LogStart.
func (s *Store) TruncateLog(g paxos.GroupID, before uint64) error {
	st, err := s.LoadGroup(g)
	if err != nil {
		return err
	}
	if before <= st.LogStart {
		return nil
	}
	if st.Restoring || before > st.Applied+1 {
		return fmt.Errorf("paxos: group %d: truncate log before %d: applied is %d (restoring %v)", g, before, st.Applied, st.Restoring)
	}
	// The barrier makes the applied state durable before the entries it was
	// built from are deleted. The deletion itself may then be lost in a
	// crash: the entries come back, which is harmless.
	if err := s.Sync(); err != nil {
		return fmt.Errorf("paxos: group %d truncate: %w", g, err)
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }() // committed or abandoned: its own error is reported
	if err := b.DeleteRange(appendLogKey(nil, g, 0), appendLogKey(nil, g, before), nil); err != nil {
		return fmt.Errorf("paxos: group %d truncate: %w", g, err)
	}
	if err := b.Set(logStartKey(g), binary.BigEndian.AppendUint64(nil, before), nil); err != nil {
		return fmt.Errorf("paxos: group %d truncate: %w", g, err)
	}
	if err := s.write(b, false); err != nil {
		return fmt.Errorf("paxos: group %d truncate: %w", g, err)
	}
	return nil
}
