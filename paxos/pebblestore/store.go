package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/paxos"
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

// Options configures Open.
type Options struct {
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
	// BlockingSync makes fdatasync, and the WAL's writes, plain blocking
	// system calls on Pebble's goroutine. By default, on the operating
	// system's filesystem, the store submits them through io_uring where
	// the kernel allows that (see asyncSyncer and walFile) and falls back
	// to the plain calls where it does not.
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
	// dir and fs are where the database lives, for DirUsage.
	dir string
	fs  vfs.FS
	// cmu guards closed: Metrics reads Pebble only while it is open.
	cmu    sync.RWMutex
	closed bool
}

var _ paxos.Storage = (*Store)(nil)

// Open opens (creating if needed) the database in dir.
func Open(dir string, opts Options) (*Store, error) {
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
	return &Store{db: db, log: log, h: h, async: async, spares: spares, dir: dir, fs: fs}, nil
}

// WALSpareStats counts the store's WAL spares (see Options.NoWALSpares).
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
	s.cmu.Lock()
	s.closed = true
	s.cmu.Unlock()
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
