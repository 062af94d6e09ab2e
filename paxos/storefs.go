package paxos

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// storeHealth latches the first storage failure of a Store: a write, sync,
// create, rename or link that failed on its filesystem, a failed commit or
// fsync, or a fatal error Pebble reported. Once latched it stays latched
// until the process restarts; see Store.Err for what follows.
type storeHealth struct {
	log  *slog.Logger
	err  atomic.Pointer[error]
	once sync.Once
}

// fail latches cause (the first call wins) and logs it once. It returns
// the latched error.
func (h *storeHealth) fail(cause error) error {
	err := fmt.Errorf("%w: %w", ErrStorageFailed, cause)
	h.once.Do(func() {
		h.err.Store(&err)
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
// first failed mutation (so the failure is known before Pebble itself
// hears of it: see Store's commit), and from then on it refuses every
// mutation — writes, syncs, creates, renames, links and removes — so that
// the data directory stays as it was when the failure happened: an image
// Pebble recovers from like from a crash at that moment, whatever Pebble
// goes on to do in memory after an error it calls fatal.
type fenceFS struct {
	vfs.FS
	h *storeHealth
}

func (fs *fenceFS) check() error { return fs.h.failed() }

// observe latches a failed mutation's error and returns it unchanged.
func (fs *fenceFS) observe(err error) error {
	if err != nil {
		fs.h.fail(err)
	}
	return err
}

func (fs *fenceFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, fs.observe(err)
	}
	return &fenceFile{File: f, fs: fs}, nil
}

func (fs *fenceFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.Create(name, category))
}

func (fs *fenceFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.OpenReadWrite(name, category, opts...))
}

func (fs *fenceFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, category))
}

// OpenDir's directories are synced after a create or rename in them.
func (fs *fenceFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &fenceFile{File: f, fs: fs}, nil
}

func (fs *fenceFS) Link(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.observe(fs.FS.Link(oldname, newname))
}

func (fs *fenceFS) Rename(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.observe(fs.FS.Rename(oldname, newname))
}

func (fs *fenceFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.observe(fs.FS.MkdirAll(dir, perm))
}

// Remove and RemoveAll are refused after a failure (Pebble must not delete
// a file its durable state may still need), but their own errors latch
// nothing: Pebble tolerates them, and a file left behind loses no data.
func (fs *fenceFS) Remove(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Remove(name)
}

func (fs *fenceFS) RemoveAll(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.RemoveAll(name)
}

func (fs *fenceFS) Unwrap() vfs.FS { return fs.FS }

// fenceFile is a file of a fenceFS.
type fenceFile struct {
	vfs.File
	fs *fenceFS
}

func (f *fenceFile) Write(p []byte) (int, error) {
	if err := f.fs.check(); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	return n, f.fs.observe(err)
}

func (f *fenceFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(); err != nil {
		return 0, err
	}
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.observe(err)
}

// Preallocate is refused after a failure; its own errors latch nothing
// (a filesystem may not support it, and Pebble ignores them).
func (f *fenceFile) Preallocate(offset, length int64) error {
	if err := f.fs.check(); err != nil {
		return err
	}
	return f.File.Preallocate(offset, length)
}

func (f *fenceFile) Sync() error {
	if err := f.fs.check(); err != nil {
		return err
	}
	return f.fs.observe(f.File.Sync())
}

func (f *fenceFile) SyncData() error {
	if err := f.fs.check(); err != nil {
		return err
	}
	return f.fs.observe(f.File.SyncData())
}

func (f *fenceFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.check(); err != nil {
		return false, err
	}
	full, err := f.File.SyncTo(length)
	return full, f.fs.observe(err)
}
