package paxos

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Storage layout. Every key starts with the group id (u32, big-endian) and a
// kind byte, so that one group's keys are contiguous, byte order equals
// numeric order, and a range of a group's keys can be dropped with one
// DeleteRange:
//
//	[g][kindHardState]             -> hard state (version, promised, committed)
//	[g][kindMeta][name]            -> opaque bytes
//	[g][kindLog][instance u64]     -> AppendEntry encoding
//	[g][kindApplied]               -> u64
//	[g][kindLogStart]              -> u64
//	[g][kindRestoring]             -> present while a snapshot install is unfinished
//	[g][kindSM][key]               -> the state machine's own keys and values
const (
	kindHardState byte = 1
	kindMeta      byte = 2
	kindLog       byte = 3
	kindApplied   byte = 4
	kindLogStart  byte = 5
	kindRestoring byte = 6
	kindSM        byte = 7

	// prefixLen is the length of [g][kind].
	prefixLen = 5

	hardStateVersion = 1
)

// Tuning, from the Pebble notes in the design references: large memtables
// and a generous L0 stop threshold so bursts of small Sync writes do not
// stall, a block cache, and bloom filters for point reads of flushed keys.
const (
	storeMemTableSize = 64 << 20
	storeCacheSize    = 64 << 20
)

// storeFormat is the on-disk format the store creates and ratchets to. It is
// named rather than pebble.FormatNewest so that upgrading Pebble never
// ratchets the format (irreversibly) by accident. In v2.1.7 it equals
// FormatNewest.
const storeFormat = pebble.FormatValueSeparation

// StoreOptions configures OpenStore.
type StoreOptions struct {
	// Logger receives Pebble's log lines and the store's own. Nil means
	// slog.Default().
	Logger *slog.Logger
	// FS is the filesystem Pebble uses; nil means the operating system's.
	// Tests use vfs.NewMem or vfs.NewCrashableMem.
	FS vfs.FS
	// MemTableSize and CacheSize override the defaults (64 MiB each) when
	// positive; tests lower them to save memory.
	MemTableSize uint64
	CacheSize    int64
	// BlockingSync makes fdatasync a plain blocking system call on
	// Pebble's goroutine. By default, on the operating system's
	// filesystem, the store submits it through io_uring where the kernel
	// allows that (see asyncSyncer) and falls back to the plain call where
	// it does not.
	BlockingSync bool
	// NoWALSpares turns off the zero-filled files the store otherwise
	// keeps ready for Pebble's next WAL on the operating system's
	// filesystem (see walSpares): on a copy-on-write filesystem, where
	// writing over a file allocates anew, they only cost writes.
	NoWALSpares bool
	// walSparesOnFS gives a store on FS (a test's) WAL spares too.
	walSparesOnFS bool
}

// Store is a node's durable state for every group it hosts: acceptor hard
// state, log entries, applied instance, metadata and each group's
// state-machine keyspace, in one Pebble database so that all groups share
// one WAL and their concurrent Sync commits share fsyncs.
//
// A Store is safe for concurrent use, except Close. Writes of one group
// (its batches, TruncateLog and snapshot installs) must be serialized by the
// group's owner; different groups need no coordination.
//
// Pebble makes a committed write visible to readers before a Sync commit's
// fsync has finished. Never answer a peer or a client from state that was
// only read back: wait for the Commit that wrote it.
//
// # Storage failures
//
// A write, sync, create, rename or link that fails on the store's
// filesystem, a failed commit or fsync, or an error Pebble itself calls
// fatal, fails the whole store, for good (Err then returns it, wrapping
// ErrStorageFailed and the cause): every later write is refused without
// reaching Pebble; reads go on working. A replica cannot vouch for
// anything after such a failure (what was written but not synced may or
// may not be on disk, and Pebble's WAL writer does not recover from an
// error), so the Host stops every group (fail-stop) and the node keeps
// running only to report it; restarting it once the disk is fixed
// recovers from what reached the disk, like after a crash.
//
// This is why the store is built the way it is:
//   - Pebble's own policy is to call its Logger's Fatalf on a failed
//     synchronous commit (and on MANIFEST errors), and to panic in a
//     commit that finds its WAL writer failed. The store never makes a
//     synchronous Pebble commit (a synced write is ApplyNoSyncWait then
//     SyncWait, which hands the fsync's error to the caller), its Fatalf
//     latches the failure instead of exiting, and its filesystem (fenceFS)
//     latches a failed write before Pebble hears of it: writes are
//     serialized and each checks the latch first, so no write reaches a
//     failed WAL writer.
//   - After the failure the filesystem keeps Pebble from appending to its
//     MANIFEST and slows its retries of failed flushes (see fenceFS).
//   - What is left to Pebble: a WAL failure that strikes while Pebble
//     rotates its WAL (once per memtable, 64 MiB of writes) panics inside
//     Pebble and ends the process, which is fail-stop too.
type Store struct {
	db    *pebble.DB
	log   *slog.Logger
	h     *storeHealth
	async *asyncSyncer // nil: fdatasync blocks a thread
	// spares hands Pebble zero-filled WAL files; nil without them.
	spares *walSpares
	// wmu serializes writes handed to Pebble with the check of h.
	wmu sync.Mutex
}

// OpenStore opens (creating if needed) the database in dir.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	base := opts.Logger
	if base == nil {
		base = slog.Default()
	}
	log := base.With("component", "store")
	h := newStoreHealth(log)
	fs := opts.FS
	var async *asyncSyncer
	if fs == nil {
		fs = vfs.Default
		if !opts.BlockingSync {
			var err error
			if async, err = newAsyncSyncer(64); err != nil {
				log.Info("fdatasync through io_uring unavailable; it blocks a thread", "err", err)
			} else {
				async.log = log
			}
		}
	}
	memTable := uint64(storeMemTableSize)
	if opts.MemTableSize > 0 {
		memTable = opts.MemTableSize
	}
	var spares *walSpares
	if (opts.FS == nil || opts.walSparesOnFS) && !opts.NoWALSpares {
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			if async != nil {
				async.close()
			}
			return nil, fmt.Errorf("paxos: open store %q: %w", dir, err)
		}
		spares = openWALSpares(fs, dir, memTable, log)
	}
	po := &pebble.Options{
		FormatMajorVersion:          storeFormat,
		Logger:                      pebbleLogger{log: base.With("component", "pebble"), h: h},
		MemTableSize:                memTable,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		CacheSize:                   storeCacheSize,
		CompactionConcurrencyRange:  func() (int, int) { return 1, 2 },
		FS:                          &fenceFS{FS: fs, h: h, async: async, spares: spares},
	}
	po.Experimental.CompactionScheduler = newLazyCompactionScheduler()
	if opts.CacheSize > 0 {
		po.CacheSize = opts.CacheSize
	}
	// Levels inherit the filter policy of the level above them.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, po)
	if err == nil {
		err = h.failed()
		if err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		if async != nil {
			async.close()
		}
		if spares != nil {
			spares.close()
		}
		return nil, fmt.Errorf("paxos: open store %q: %w", dir, err)
	}
	log.Info("store open", "dir", dir, "format", db.FormatMajorVersion(), "io_uring_fsync", async != nil, "wal_spares", spares != nil)
	return &Store{db: db, log: log, h: h, async: async, spares: spares}, nil
}

// WALSpareStats counts the store's WAL spares (see StoreOptions.NoWALSpares).
type WALSpareStats struct {
	// Enabled is whether the store keeps spares.
	Enabled bool
	// Taken counts the WAL files that were a zero-filled spare; Missed
	// counts those that needed one (a new WAL, or a recycled one smaller
	// than the last WAL's content) and found none ready, and were
	// appended to. Both count from the store's open.
	Taken, Missed uint64
}

// WALSpares returns the counts of the store's WAL spares.
func (s *Store) WALSpares() WALSpareStats {
	if s.spares == nil {
		return WALSpareStats{}
	}
	return WALSpareStats{Enabled: true, Taken: uint64(s.spares.taken.Load()), Missed: uint64(s.spares.missed.Load())}
}

// Err returns nil while the store is healthy, and after a storage failure
// the error that failed it, which wraps ErrStorageFailed and the cause.
func (s *Store) Err() error { return s.h.failed() }

// write hands b to Pebble, serialized with the store's other writes: with
// sync by ApplyNoSyncWait (visible at once; the caller must then call
// syncWait), without by a NoSync commit. It refuses once the store has
// failed; on an error, b was not applied (or its sync was waited for).
func (s *Store) write(b *pebble.Batch, sync bool) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.h.failed(); err != nil {
		return err
	}
	var err error
	if sync {
		err = s.db.ApplyNoSyncWait(b, pebble.Sync)
	} else {
		err = b.Commit(pebble.NoSync)
	}
	if err != nil {
		return s.h.fail(err)
	}
	// Pebble reports some failures only to its logger's Fatalf (which
	// latches) and then returns as if the write had succeeded.
	if err := s.h.failed(); err != nil {
		if sync {
			_ = b.SyncWait()
		}
		return err
	}
	return nil
}

// syncWait waits until b, handed to write with sync, is durable.
func (s *Store) syncWait(b *pebble.Batch) error {
	if err := b.SyncWait(); err != nil {
		return s.h.fail(err)
	}
	return nil
}

// commitSync commits b and waits until it is durable.
func (s *Store) commitSync(b *pebble.Batch) error {
	if err := s.write(b, true); err != nil {
		return err
	}
	return s.syncWait(b)
}

// Close closes the database. Every Batch, SnapshotSource and SnapshotInstall
// must be closed first, and no other call may run concurrently.
//
// It flushes the memtables first, so that the next Open does not replay
// the WAL: after 1M locks were taken, that replay was 3.7–4.8 s of a
// restart, and Open took 0.03 s after a flush. A crash skips this; Open
// then replays as usual.
//
// After a storage failure it closes the database without a flush and
// returns the failure (wrapping ErrStorageFailed).
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// Pebble is closed below (every return path) before the ring: no
	// fdatasync is in flight when it goes.
	defer func() {
		if s.async != nil {
			s.async.close()
		}
		if s.spares != nil {
			s.spares.close()
		}
	}()
	if ferr := s.h.failed(); ferr != nil {
		s.h.close()
		if err := s.db.Close(); err != nil {
			s.log.Warn("close of a failed store", "err", err)
		}
		return fmt.Errorf("paxos: close store: %w", ferr)
	}
	// Pebble's Flush would wait forever for a flush that keeps failing.
	flushed, err := s.db.AsyncFlush()
	if err == nil {
		select {
		case <-flushed:
		case <-s.h.failedCh:
		}
		err = s.h.failed()
	}
	if err != nil {
		s.h.close()
		return errors.Join(fmt.Errorf("paxos: flush store: %w", err), s.db.Close())
	}
	s.h.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("paxos: close store: %w", err)
	}
	return nil
}

// Sync makes every write committed so far durable (a synced, empty WAL
// record: the WAL is sequential, so syncing it covers all earlier commits).
func (s *Store) Sync() error {
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }() // an empty batch: nothing to lose
	err := b.LogData(nil, nil)
	if err == nil {
		err = s.commitSync(b)
	}
	if err != nil {
		return fmt.Errorf("paxos: store sync: %w", err)
	}
	return nil
}

// pebbleLogger adapts slog to pebble.Logger.
//
// Fatalf fails the store instead of exiting: Pebble calls it for errors
// after which its state is unknown (a failed synchronous commit, which the
// store never makes; MANIFEST write errors, after which it returns the
// error to the job that wrote; invariant violations). The store then
// refuses every write, the filesystem every MANIFEST change, and the Host
// stops every group, so nothing Pebble does next reaches a peer; the
// process lives on to report the failure (Store.Err, the server's /status
// and metrics). Exiting would be fail-stop too, but would leave an
// operator only a log line and a restart loop to go by.
type pebbleLogger struct {
	log *slog.Logger
	h   *storeHealth
}

func (l pebbleLogger) Infof(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelInfo) {
		l.log.Info(fmt.Sprintf(format, args...))
	}
}

// Errorf logs at Error level while the store is healthy. Once it failed,
// Pebble's errors are the refusals of the failed store's filesystem (a
// flush or compaction that cannot write its output, retried every
// createRetryDelay): they go to the Debug level, so that the failure is
// logged once, at the moment it happened.
func (l pebbleLogger) Errorf(format string, args ...any) {
	level := slog.LevelError
	if l.h.failed() != nil {
		level = slog.LevelDebug
	}
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	_ = l.h.fail(fmt.Errorf("pebble: fatal: %s", fmt.Sprintf(format, args...))) // latched: Store.Err reports it
}

// ---- keys ----

func appendPrefix(dst []byte, g GroupID, kind byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(g))
	return append(dst, kind)
}

func appendLogKey(dst []byte, g GroupID, inst uint64) []byte {
	return binary.BigEndian.AppendUint64(appendPrefix(dst, g, kindLog), inst)
}

// kindEnd returns the first key after every key of (g, kind).
func kindEnd(g GroupID, kind byte) []byte {
	return appendPrefix(nil, g, kind+1)
}

func hardKey(g GroupID) []byte      { return appendPrefix(nil, g, kindHardState) }
func appliedKey(g GroupID) []byte   { return appendPrefix(nil, g, kindApplied) }
func logStartKey(g GroupID) []byte  { return appendPrefix(nil, g, kindLogStart) }
func restoringKey(g GroupID) []byte { return appendPrefix(nil, g, kindRestoring) }

func appendSMKey(dst []byte, g GroupID, key []byte) []byte {
	return append(appendPrefix(dst, g, kindSM), key...)
}

// prefixEnd returns the first key after every key that starts with p, or
// nil if there is none (p is empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ---- values ----

func appendHardState(dst []byte, hs HardState) []byte {
	dst = append(dst, hardStateVersion)
	dst = appendBallot(dst, hs.Promised)
	return binary.AppendUvarint(dst, hs.Committed)
}

func decodeHardState(b []byte) (HardState, error) {
	d := wireDecoder{b: b}
	if v := d.byte1("hard state version"); d.err == nil && v != hardStateVersion {
		d.fail("unknown hard state version %d", v)
	}
	hs := HardState{Promised: d.ballot("promised")}
	hs.Committed = d.uvarint("committed")
	d.end()
	if d.err != nil {
		return HardState{}, d.err
	}
	return hs, nil
}

func decodeU64(b []byte, what string) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %s has %d bytes, want 8", ErrCorrupt, what, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// pebbleReader is what Store reads through: the DB or a pebble.Snapshot.
type pebbleReader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// storeGet calls fn with the value of key if it exists. The value is valid only
// during fn.
func storeGet(r pebbleReader, key []byte, fn func(v []byte) error) (bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = fn(v)
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	return true, err
}

func storeGetU64(r pebbleReader, key []byte, what string, def uint64) (uint64, error) {
	val := def
	_, err := storeGet(r, key, func(v []byte) error {
		var err error
		val, err = decodeU64(v, what)
		return err
	})
	return val, err
}

// ---- reads ----

// GroupState is what a group's runtime needs at start.
type GroupState struct {
	// Hard is the acceptor's hard state (zero if never written).
	Hard HardState
	// LogStart is the first instance still held in the log (1 when never
	// truncated).
	LogStart uint64
	// Last is the highest instance with a stored entry (0 if none, even
	// after a truncation: then LogStart-1 is the highest instance the log
	// ever covered).
	Last uint64
	// Applied is the last instance whose commands are reflected in the
	// state-machine keyspace.
	Applied uint64
	// Restoring says a snapshot install was interrupted: the state-machine
	// keyspace is garbage until a new install finishes.
	Restoring bool
}

// LoadGroup reads group g's state, consistently (from one Pebble snapshot).
func (s *Store) LoadGroup(g GroupID) (GroupState, error) {
	snap := s.db.NewSnapshot()
	defer func() { _ = snap.Close() }() // a read-only view: closing it fails only when closed twice
	var st GroupState
	var err error
	if _, err = storeGet(snap, hardKey(g), func(v []byte) error {
		st.Hard, err = decodeHardState(v)
		return err
	}); err != nil {
		return GroupState{}, fmt.Errorf("paxos: load group %d hard state: %w", g, err)
	}
	if st.LogStart, err = storeGetU64(snap, logStartKey(g), "log start", 1); err != nil {
		return GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	if st.Applied, err = storeGetU64(snap, appliedKey(g), "applied", 0); err != nil {
		return GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	if st.Restoring, err = storeGet(snap, restoringKey(g), func([]byte) error { return nil }); err != nil {
		return GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	it, err := snap.NewIter(&pebble.IterOptions{
		LowerBound: appendPrefix(nil, g, kindLog),
		UpperBound: kindEnd(g, kindLog),
	})
	if err != nil {
		return GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	if it.Last() {
		k := it.Key()
		if len(k) != prefixLen+8 {
			err = fmt.Errorf("%w: log key of %d bytes", ErrCorrupt, len(k))
		} else {
			st.Last = binary.BigEndian.Uint64(k[prefixLen:])
		}
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return GroupState{}, fmt.Errorf("paxos: load group %d last entry: %w", g, err)
	}
	return st, nil
}

// decodeStoredEntry decodes a log value and checks it is for inst.
func decodeStoredEntry(v []byte, inst uint64) (Entry, error) {
	e, err := DecodeEntry(v)
	if err != nil {
		return Entry{}, err
	}
	if e.Instance != inst {
		return Entry{}, fmt.Errorf("%w: entry under instance %d says %d", ErrCorrupt, inst, e.Instance)
	}
	return e, nil
}

// Entries returns group g's consecutive stored entries from `from` up to `to`
// inclusive: it stops at the first missing instance, and after the entry
// that brings the total encoded size to maxBytes or more (so it returns at
// least one entry if `from` is stored). maxBytes <= 0 means no limit. The
// result is nil if `from` is not stored.
func (s *Store) Entries(g GroupID, from, to uint64, maxBytes int) ([]Entry, error) {
	if to < from {
		return nil, nil
	}
	upper := kindEnd(g, kindLog)
	if to < math.MaxUint64 {
		upper = appendLogKey(nil, g, to+1)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: appendLogKey(nil, g, from), UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries: %w", g, err)
	}
	var out []Entry
	total := 0
	next := from
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != prefixLen+8 {
			err = fmt.Errorf("%w: log key of %d bytes", ErrCorrupt, len(k))
			break
		}
		if binary.BigEndian.Uint64(k[prefixLen:]) != next {
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		var e Entry
		if e, err = decodeStoredEntry(v, next); err != nil {
			break
		}
		if out == nil {
			out = make([]Entry, 0, min(to-from+1, 64))
		}
		out = append(out, e)
		total += len(v)
		if (maxBytes > 0 && total >= maxBytes) || next == to {
			break
		}
		next++
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries from %d: %w", g, from, err)
	}
	return out, nil
}

// EntriesFrom returns every stored entry of group g at or above `from`, in
// instance order, gaps included (an acceptor may hold instances it accepted
// out of order). It is meant for loading a group at start, e.g. every entry
// above Applied.
func (s *Store) EntriesFrom(g GroupID, from uint64) ([]Entry, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: appendLogKey(nil, g, from), UpperBound: kindEnd(g, kindLog)})
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries: %w", g, err)
	}
	var out []Entry
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != prefixLen+8 {
			err = fmt.Errorf("%w: log key of %d bytes", ErrCorrupt, len(k))
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		var e Entry
		if e, err = decodeStoredEntry(v, binary.BigEndian.Uint64(k[prefixLen:])); err != nil {
			break
		}
		out = append(out, e)
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries from %d: %w", g, from, err)
	}
	return out, nil
}

// ---- state-machine access ----

// Writer writes into one group's state-machine keyspace. Keys and values are
// copied; the caller may reuse them at once.
type Writer interface {
	Set(key, value []byte)
	Delete(key []byte)
}

// Reader reads one group's state-machine keyspace.
type Reader interface {
	// Get returns a copy of the value of key, if set.
	Get(key []byte) ([]byte, bool, error)
	// Scan calls fn for every key that starts with prefix, in key order,
	// until fn returns an error, which Scan returns. key and value are
	// valid only during fn.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// SMReader returns a Reader of group g's state-machine keyspace. It reads
// the latest committed state (including commits whose fsync is still under
// way); it is safe for concurrent use.
func (s *Store) SMReader(g GroupID) Reader { return smReader{r: s.db, g: g} }

type smReader struct {
	r pebbleReader
	g GroupID
}

func (r smReader) Get(key []byte) ([]byte, bool, error) {
	var buf [64]byte
	var out []byte
	ok, err := storeGet(r.r, appendSMKey(buf[:0], r.g, key), func(v []byte) error {
		out = bytes.Clone(v)
		if out == nil {
			out = []byte{}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("paxos: group %d state machine get: %w", r.g, err)
	}
	return out, ok, nil
}

func (r smReader) Scan(prefix []byte, fn func(key, value []byte) error) error {
	lower := appendSMKey(nil, r.g, prefix)
	upper := prefixEnd(lower)
	if len(prefix) == 0 || len(upper) <= prefixLen {
		upper = kindEnd(r.g, kindSM)
	}
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("paxos: group %d state machine scan: %w", r.g, err)
	}
	var ferr error
	for ok := it.First(); ok; ok = it.Next() {
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		if ferr = fn(it.Key()[prefixLen:], v); ferr != nil {
			break
		}
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("paxos: group %d state machine scan: %w", r.g, err)
	}
	return ferr
}

// ---- batches ----

// storeBatch is the Store's Batch: a Pebble batch.
type storeBatch struct {
	s   *Store
	b   *pebble.Batch
	key []byte
	val []byte
	err error // first error from Pebble, returned by Commit
	sm  map[GroupID]*smWriter
	// applied says Apply handed b to Pebble and SyncWait has not yet run.
	applied bool
}

// NewBatch returns an empty batch. Close it when done.
func (s *Store) NewBatch() Batch {
	return &storeBatch{s: s, b: s.db.NewBatch()}
}

func (b *storeBatch) note(err error) {
	if err != nil && b.err == nil {
		b.err = err
	}
}

func (b *storeBatch) set(key, val []byte) { b.note(b.b.Set(key, val, nil)) }

// SetHardState records group g's hard state.
func (b *storeBatch) SetHardState(g GroupID, hs HardState) {
	b.key = appendPrefix(b.key[:0], g, kindHardState)
	b.val = appendHardState(b.val[:0], hs)
	b.set(b.key, b.val)
}

// PutEntry stores e in group g's log under e.Instance, replacing any entry
// there.
func (b *storeBatch) PutEntry(g GroupID, e *Entry) {
	b.key = appendLogKey(b.key[:0], g, e.Instance)
	b.val = AppendEntry(b.val[:0], e)
	b.set(b.key, b.val)
}

// SetApplied records the last instance whose commands group g's
// state-machine keyspace reflects; commit it with those writes.
func (b *storeBatch) SetApplied(g GroupID, inst uint64) {
	b.key = appendPrefix(b.key[:0], g, kindApplied)
	b.val = binary.BigEndian.AppendUint64(b.val[:0], inst)
	b.set(b.key, b.val)
}

// SM returns a Writer into group g's state-machine keyspace that adds its
// writes to b.
func (b *storeBatch) SM(g GroupID) Writer {
	if w, ok := b.sm[g]; ok {
		return w
	}
	if b.sm == nil {
		b.sm = make(map[GroupID]*smWriter)
	}
	w := &smWriter{b: b, g: g}
	b.sm[g] = w
	return w
}

type smWriter struct {
	b *storeBatch
	g GroupID
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
		b.b = b.s.db.NewBatch()
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
		b.b = b.s.db.NewBatch()
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
		b.b = b.s.db.NewBatch()
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
func (s *Store) TruncateLog(g GroupID, before uint64) error {
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

// ---- snapshots: the sending side ----

// storeSnapshot is the Store's SnapshotSource: a consistent image of one
// group's state-machine keyspace and applied instance, taken when it was
// opened. Each chunk holds whole pairs, each encoded as uvarint len(key) |
// key | uvarint len(value) | value.
type storeSnapshot struct {
	g         GroupID
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
func (s *Store) OpenSnapshot(g GroupID, chunkSize int) (SnapshotSource, error) {
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
	g    GroupID
	b    *pebble.Batch
	done bool
}

// BeginInstall durably marks group g Restoring and clears its state-machine
// keyspace.
func (s *Store) BeginInstall(g GroupID) (SnapshotInstall, error) {
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
	d := wireDecoder{b: chunk}
	for d.off < len(chunk) && d.err == nil {
		kn := d.count("snapshot key length", 1)
		k := chunk[d.off : d.off+kn]
		d.off += kn
		vn := d.count("snapshot value length", 1)
		if d.err != nil {
			break
		}
		v := chunk[d.off : d.off+vn]
		d.off += vn
		key = appendSMKey(key[:0], si.g, k)
		if err := si.b.Set(key, v, nil); err != nil {
			d.err = err
		}
	}
	if d.err != nil {
		si.b.Reset()
		return fmt.Errorf("paxos: group %d snapshot chunk: %w", si.g, d.err)
	}
	err := si.s.write(si.b, false)
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
		b.Set(hardKey(g), appendHardState(nil, hs), nil),
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
