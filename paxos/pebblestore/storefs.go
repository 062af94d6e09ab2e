package pebblestore

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/paxos"
)

// storeHealth latches the first storage failure of a Store: a write, sync,
// create, rename or link that failed on its filesystem, a failed commit or
// fsync, or a fatal error Pebble reported. Once latched it stays latched
// until the process restarts; see Store.Err for what follows.
type storeHealth struct {
	log  *slog.Logger
	err  atomic.Pointer[error]
	once sync.Once
	// failedCh is closed when the store fails.
	failedCh chan struct{}
	// closing is closed when the store closes: refused creates stop
	// waiting (see refuseCreate).
	closing   chan struct{}
	closeOnce sync.Once
}

func newStoreHealth(log *slog.Logger) *storeHealth {
	return &storeHealth{log: log, failedCh: make(chan struct{}), closing: make(chan struct{})}
}

// close ends the waits of refused creates.
func (h *storeHealth) close() { h.closeOnce.Do(func() { close(h.closing) }) }

// createRetryDelay is how long a create refused after a failure waits
// before it returns.
const createRetryDelay = time.Second

// fail latches cause (the first call wins) and logs it once. It returns
// the latched error.
func (h *storeHealth) fail(cause error) error {
	err := fmt.Errorf("%w: %w", paxos.ErrStorageFailed, cause)
	h.once.Do(func() {
		h.err.Store(&err)
		close(h.failedCh)
		h.log.Error("storage failed: every write refused from now on; restart the node once the disk is fixed", "err", cause)
	})
	return *h.err.Load()
}

// failed returns the latched error, or nil.
func (h *storeHealth) failed() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fenceFS wraps a Store's filesystem. It latches the store's health on the
// first failed mutation, before the error reaches Pebble (see Store.write
// for why that order matters). After the failure:
//
//   - it refuses every mutation of Pebble's metadata (MANIFEST files and
//     the markers that name the current one): after a failed MANIFEST
//     write Pebble calls Fatalf and goes on, and an append behind a torn
//     record could make the MANIFEST unreadable at the next start;
//   - it holds every file creation back by createRetryDelay (or until the
//     store closes): Pebble retries a failed flush or compaction at once,
//     without a backoff, each retry starting with the creation of its
//     output, and would otherwise spin a CPU and fill the log;
//   - everything else goes through. The store hands Pebble no more writes,
//     so what remains is Pebble finishing a commit that was under way (a
//     refusal there, e.g. of the next WAL file, would make Pebble panic)
//     and its background flushes and compactions, which are crash-safe:
//     the directory stays one Pebble recovers from at the next start.
type fenceFS struct {
	vfs.FS
	h *storeHealth
	// async, if set, runs fdatasync through io_uring (see asyncSyncer).
	async *asyncSyncer
	// spares, if set, hands Pebble's new WALs zero-filled files (see
	// walSpares).
	spares *walSpares
	// lastWAL is the WAL file Pebble created last (with spares only).
	lastWAL atomic.Pointer[fenceFile]
}

// isMeta reports whether name is a MANIFEST or a marker file.
func isMeta(name string) bool {
	base := filepath.Base(name)
	return strings.HasPrefix(base, "MANIFEST-") || strings.HasPrefix(base, "marker.")
}

// guard returns the store's failure if it refuses a mutation of name.
func (fs *fenceFS) guard(name string) error {
	if err := fs.h.failed(); err != nil && isMeta(name) {
		return err
	}
	return nil
}

// guardCreate is guard for the calls that create name; after a failure
// it waits first (see fenceFS).
func (fs *fenceFS) guardCreate(name string) error {
	if fs.h.failed() == nil {
		return nil
	}
	t := time.NewTimer(createRetryDelay)
	select {
	case <-t.C:
	case <-fs.h.closing:
		t.Stop()
	}
	return fs.guard(name)
}

// observe latches a failed mutation's error and returns it unchanged.
func (fs *fenceFS) observe(err error) error {
	if err != nil {
		_ = fs.h.fail(err) // latched; the caller gets err itself
	}
	return err
}

func (fs *fenceFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, fs.observe(err)
	}
	return &fenceFile{File: f, fs: fs, name: name}, nil
}

// wrapCreated is wrap for a file created or reused for writing from its
// start: a WAL's writes then wait for its syncs (see walFile).
func (fs *fenceFS) wrapCreated(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, fs.observe(err)
	}
	ff := &fenceFile{File: f, fs: fs, name: name}
	if isWAL(name) {
		return fs.deferWrites(ff), nil
	}
	return ff, nil
}

func (fs *fenceFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.guardCreate(name); err != nil {
		return nil, err
	}
	if fs.spares != nil && isWAL(name) {
		if f, ok := fs.fromSpare(name, category, 0); ok {
			return f, nil
		}
		f, err := fs.FS.Create(name, category)
		if err != nil {
			return nil, fs.observe(err)
		}
		return fs.wrapWAL(name, f), nil
	}
	f, err := fs.FS.Create(name, category)
	return fs.wrapCreated(name, f, err)
}

// fromSpare renames a WAL spare larger than minSize to name and opens it
// for writing from its start. It reports false, and leaves name alone,
// when there is none or the rename failed (the spare is given back).
func (fs *fenceFS) fromSpare(name string, category vfs.DiskWriteCategory, minSize int64) (vfs.File, bool) {
	path, size, ok := fs.spares.take(minSize, fs.lastWALBytes())
	if !ok {
		return nil, false
	}
	f, err := fs.FS.ReuseForWrite(path, name, category)
	if err != nil {
		fs.spares.log.Warn("could not use a WAL spare", "wal", name, "err", err)
		fs.spares.put(path, size)
		return nil, false
	}
	fs.spares.taken.Add(1)
	return fs.wrapWAL(name, f), true
}

// lastWALBytes returns how much Pebble wrote to the WAL it created last,
// or 0.
func (fs *fenceFS) lastWALBytes() int64 {
	if f := fs.lastWAL.Load(); f != nil {
		return f.written.Load()
	}
	return 0
}

// wrapWAL wraps a WAL file that opened without an error and remembers it
// as the last WAL, counting what Pebble writes to it.
func (fs *fenceFS) wrapWAL(name string, f vfs.File) vfs.File {
	wf := &fenceFile{File: f, fs: fs, name: name, wal: true}
	fs.lastWAL.Store(wf)
	return fs.deferWrites(wf)
}

func (fs *fenceFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.guardCreate(name); err != nil {
		return nil, err
	}
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.wrap(name, f, err)
}

// ReuseForWrite recycles an obsolete WAL, or, when oldname is smaller
// than what Pebble wrote to its last WAL (the new one would be appended to
// past its end) and a larger WAL spare is ready, removes oldname and
// renames the spare to newname instead (ReuseForWrite's contract allows
// either; see walSpares). Once Pebble's WALs have stopped growing, its
// recycled ones are large enough and spares are left alone.
func (fs *fenceFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.guardCreate(newname); err != nil {
		return nil, err
	}
	if fs.spares != nil && isWAL(newname) {
		if fi, err := fs.FS.Stat(oldname); err == nil && fi.Size() < fs.lastWALBytes() {
			if f, ok := fs.replaceBySpare(oldname, newname, category, fi.Size()); ok {
				return f, nil
			}
		}
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err == nil && fs.spares != nil && isWAL(newname) {
		return fs.wrapWAL(newname, f), nil
	}
	return fs.wrapCreated(newname, f, err)
}

// replaceBySpare is ReuseForWrite with a spare larger than oldSize in
// oldname's place. It reports false, with oldname untouched, when there is
// no such spare or oldname could not be removed.
func (fs *fenceFS) replaceBySpare(oldname, newname string, category vfs.DiskWriteCategory, oldSize int64) (vfs.File, bool) {
	path, size, ok := fs.spares.take(oldSize, fs.lastWALBytes())
	if !ok {
		return nil, false
	}
	if err := fs.FS.Remove(oldname); err != nil {
		fs.spares.put(path, size)
		return nil, false
	}
	f, err := fs.FS.ReuseForWrite(path, newname, category)
	if err != nil {
		// oldname is gone: newname is made as Create would.
		fs.spares.log.Warn("could not use a WAL spare", "wal", newname, "err", err)
		fs.spares.put(path, size)
		if f, err = fs.FS.Create(newname, category); err != nil {
			_ = fs.observe(err)
			return nil, false
		}
	} else {
		fs.spares.taken.Add(1)
	}
	return fs.wrapWAL(newname, f), true
}

// OpenDir's directories are synced after a create or rename in them.
func (fs *fenceFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &fenceFile{File: f, fs: fs, name: name}, nil
}

func (fs *fenceFS) Link(oldname, newname string) error {
	if fs.guard(oldname) != nil || fs.guard(newname) != nil {
		return fs.h.failed()
	}
	return fs.observe(fs.FS.Link(oldname, newname))
}

func (fs *fenceFS) Rename(oldname, newname string) error {
	if fs.guard(oldname) != nil || fs.guard(newname) != nil {
		return fs.h.failed()
	}
	return fs.observe(fs.FS.Rename(oldname, newname))
}

func (fs *fenceFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.observe(fs.FS.MkdirAll(dir, perm))
}

// Remove and RemoveAll latch nothing: Pebble tolerates their errors, and
// a file left behind loses no data.
func (fs *fenceFS) Remove(name string) error {
	if err := fs.guard(name); err != nil {
		return err
	}
	return fs.FS.Remove(name)
}

func (fs *fenceFS) RemoveAll(name string) error {
	if err := fs.guard(name); err != nil {
		return err
	}
	return fs.FS.RemoveAll(name)
}

func (fs *fenceFS) Unwrap() vfs.FS { return fs.FS }

// fenceFile is a file of a fenceFS.
type fenceFile struct {
	vfs.File
	fs   *fenceFS
	name string
	// wal: a WAL file of a store with spares; written counts the bytes
	// Pebble wrote to it (see walSpares.take).
	wal     bool
	written atomic.Int64
}

func (f *fenceFile) Write(p []byte) (int, error) {
	if err := f.fs.guard(f.name); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	if f.wal {
		f.written.Add(int64(n))
	}
	return n, f.fs.observe(err)
}

func (f *fenceFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.guard(f.name); err != nil {
		return 0, err
	}
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.observe(err)
}

// Preallocate latches nothing: a filesystem may not support it, and
// Pebble ignores its errors.
func (f *fenceFile) Preallocate(offset, length int64) error {
	if err := f.fs.guard(f.name); err != nil {
		return err
	}
	return f.File.Preallocate(offset, length)
}

func (f *fenceFile) Sync() error {
	if err := f.fs.guard(f.name); err != nil {
		return err
	}
	return f.fs.observe(f.File.Sync())
}

func (f *fenceFile) SyncData() error {
	if err := f.fs.guard(f.name); err != nil {
		return err
	}
	if a := f.fs.async; a != nil {
		if fd := f.File.Fd(); fd != vfs.InvalidFd {
			return f.fs.observe(a.fdatasync(fd))
		}
	}
	return f.fs.observe(f.File.SyncData())
}

func (f *fenceFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.guard(f.name); err != nil {
		return false, err
	}
	full, err := f.File.SyncTo(length)
	return full, f.fs.observe(err)
}
