package pebblestore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walSpares keeps a zero-filled, synced file ready for Pebble's next WAL,
// so that the WAL's fdatasyncs write over blocks the filesystem has
// already allocated and written instead of appending to the file.
//
// Why: an fdatasync after an append must also make the file's new size
// durable (one more write of the inode, or a journal commit on a
// journaled filesystem). On the development VM (ext4 on a virtio disk
// without FUA) 4 KiB written and fdatasynced back to back took 0.37 ms
// and 180 µs of CPU a sync when appending, 0.23 ms and 125 µs when
// writing over a zero-filled file; three such writers at once (the three
// nodes of `make bench`), 0.64 ms and 179 µs against 0.36 ms and 109 µs.
// In the cluster it took block requests per fsync from 2.95 to 2.4, and
// BenchmarkClusterPropose (15 groups, 64 outstanding) from 25.5k to 27.8k
// commands/s (means of 12 alternating runs).
//
// Pebble's own answer is WAL recycling (an obsolete WAL is renamed and
// written over), but its memtables, and so its WALs, start at 256 KiB and
// double up to MemTableSize: for a node's first minutes under load (much
// longer under a light one) every recycled WAL is smaller than the one it
// becomes, and the rest is appended. So the store hands Pebble a spare
// instead, through its filesystem (fenceFS): creating a WAL renames the
// spare into place, and so does recycling one that is smaller than what
// Pebble wrote to its last WAL (the old file is removed). Both are within
// vfs.FS's contract (ReuseForWrite may remove the old file and create a
// new one), and Pebble reads a WAL's zeroed tail as its end, as it does
// for preallocated and recycled files: its record format carries the log
// number in every chunk.
//
// Spares live in a subdirectory of the store ("wal-spares", which Pebble
// ignores) and are removed when the store opens and closes. One at a time
// is prepared, in the background, five times the size of what Pebble
// wrote to its last WAL (four for two doublings, and a margin), between
// walSpareMin and the WAL's full size (Pebble preallocates 110% of
// MemTableSize). Once Pebble's WALs have stopped growing, its recycled
// ones hold a whole WAL and are used as they are: the spare then waits for
// a WAL that is created anew. Only the operating system's filesystem gets
// spares (and not with Options.NoWALSpares).
type walSpares struct {
	fs  vfs.FS
	dir string
	log *slog.Logger
	max int64

	mu      sync.Mutex
	ready   string // path of a prepared spare, or ""
	size    int64  // its size
	next    int64  // size of the next spare to prepare
	seq     int
	working bool // a preparation is under way
	closed  bool
	wg      sync.WaitGroup

	// taken counts the WALs that got a spare (counted by the caller once
	// the spare is in place, so that the count never goes back), missed
	// those that needed one and found none ready or could not use it
	// (they are appended to); see WALSpareStats.
	taken, missed atomic.Int64
	// stopping cuts a preparation short when the store closes.
	stopping atomic.Bool
}

// errSparesClosed ends a preparation the store's close cut short.
var errSparesClosed = errors.New("paxos: WAL spares closed")

const (
	walSpareMin   = 1 << 20
	walSpareDir   = "wal-spares"
	walSpareChunk = 1 << 20
	// walSpareSyncEvery bounds the dirty data a preparation leaves to the
	// kernel at once, so that its writeback does not delay the WAL's
	// fsyncs by much.
	walSpareSyncEvery = 8 << 20
)

// openWALSpares clears dir/wal-spares and prepares the first spare before
// it returns, so that even the WAL Pebble creates on open gets one. A nil
// result (and the reason, logged) means no spares: the store works as
// without them.
func openWALSpares(fs vfs.FS, dir string, memTableSize uint64, log *slog.Logger) *walSpares {
	s := &walSpares{
		fs:   fs,
		dir:  fs.PathJoin(dir, walSpareDir),
		log:  log,
		max:  int64(memTableSize + memTableSize/10),
		next: walSpareMin,
	}
	if s.max < walSpareMin {
		s.max = walSpareMin
	}
	if err := fs.RemoveAll(s.dir); err != nil {
		log.Info("no WAL spares: cannot clear their directory", "dir", s.dir, "err", err)
		return nil
	}
	if err := fs.MkdirAll(s.dir, 0o755); err != nil {
		log.Info("no WAL spares: cannot make their directory", "dir", s.dir, "err", err)
		return nil
	}
	s.mu.Lock()
	s.working = true
	s.mu.Unlock()
	s.prepare(s.next)
	return s
}

// isWAL reports whether name is one of Pebble's WAL files (NNNNNN.log).
func isWAL(name string) bool { return strings.HasSuffix(filepath.Base(name), ".log") }

// take hands over the ready spare if it is larger than minSize: its path
// and size. The caller renames it into place (the spare is then no longer
// the pool's) or gives it back with put. lastWAL is how much Pebble wrote
// to the WAL before the one the spare is for (0: unknown). Taking one
// starts preparing the next, sized for the WAL after this one: Pebble's
// memtables double until MemTableSize, so four times lastWAL, and a
// quarter more for a margin. A ready spare too small for minSize has
// fallen behind Pebble's WALs: it is dropped for a larger one.
func (s *walSpares) take(minSize, lastWAL int64) (string, int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lastWAL > 0 {
		s.next = min(max(5*lastWAL, walSpareMin), s.max)
	}
	if s.closed || s.ready == "" || s.size <= minSize {
		if !s.closed {
			s.missed.Add(1)
		}
		if !s.closed && s.ready != "" && s.next > s.size {
			_ = s.fs.Remove(s.ready)
			s.ready, s.size = "", 0
		}
		s.startLocked()
		return "", 0, false
	}
	path, size := s.ready, s.size
	s.ready, s.size = "", 0
	s.startLocked()
	return path, size, true
}

// startLocked starts preparing the next spare, unless one is ready or
// being prepared. s.mu is held.
func (s *walSpares) startLocked() {
	if s.closed || s.working || s.ready != "" {
		return
	}
	s.working = true
	size := s.next
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.prepare(size)
	}()
}

// prepare writes a spare of size bytes of zeros, syncs it and makes it
// the ready one. On failure it logs and leaves the pool empty until the
// next take (which then misses and starts another attempt).
func (s *walSpares) prepare(size int64) {
	path, err := s.write(size)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.working = false
	if errors.Is(err, errSparesClosed) {
		return
	}
	if err != nil {
		s.log.Warn("could not prepare a WAL spare; the next WAL is appended to", "err", err)
		return
	}
	if s.closed {
		_ = s.fs.Remove(path)
		return
	}
	s.ready, s.size = path, size
}

// write writes and syncs one spare, under a temporary name until it is
// complete.
func (s *walSpares) write(size int64) (path string, err error) {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	path = s.fs.PathJoin(s.dir, fmt.Sprintf("spare-%06d", seq))
	tmp := path + ".tmp"
	f, err := s.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = s.fs.Remove(tmp)
		}
	}()
	zeros := make([]byte, walSpareChunk)
	var unsynced int64
	for off := int64(0); off < size; off += walSpareChunk {
		if s.stopping.Load() {
			return "", errors.Join(errSparesClosed, f.Close())
		}
		if _, err = f.Write(zeros[:min(walSpareChunk, size-off)]); err != nil {
			return "", errors.Join(err, f.Close())
		}
		if unsynced += walSpareChunk; unsynced >= walSpareSyncEvery {
			if err = f.SyncData(); err != nil {
				return "", errors.Join(err, f.Close())
			}
			unsynced = 0
		}
	}
	if err = f.SyncData(); err != nil {
		return "", errors.Join(err, f.Close())
	}
	if err = f.Close(); err != nil {
		return "", err
	}
	if err = s.fs.Rename(tmp, path); err != nil {
		return "", err
	}
	return path, nil
}

// put gives back a spare whose rename into place failed, if it still
// exists, as the ready one; the WAL it was taken for counts as a miss.
func (s *walSpares) put(path string, size int64) {
	s.missed.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.fs.Stat(path); err != nil || s.closed || s.ready != "" {
		_ = s.fs.Remove(path)
		return
	}
	s.ready, s.size = path, size
}

// close waits for a preparation under way and removes the spares.
func (s *walSpares) close() {
	s.stopping.Store(true)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	if err := s.fs.RemoveAll(s.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("could not remove the WAL spares", "dir", s.dir, "err", err)
	}
}
