//go:build linux

package pebblestore

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// walFile is a WAL file whose writes wait for its next sync and then go
// to the kernel with it: one io_uring submission carries the round's
// write and its fdatasync, linked, so the kernel's worker runs both and
// the process makes no write system call of its own for the WAL.
//
// Why: Pebble writes each round's records to the WAL with write(2), a
// blocking system call for the Go runtime. On a node that was idle it
// wakes the runtime's monitor (sysmon), which then polls for about a
// millisecond; with the sockets read and written raw (package rawio) it
// would be the one such wake left per round (docs/performance.md).
//
// What Pebble sees is unchanged where it matters: Write returns at once
// with every byte taken, SyncData returns once those bytes (and every
// earlier one) are durable, and Close, Sync, SyncTo, Stat and reads first
// hand over what waits. A write Pebble did not sync waits in memory until
// the next sync or Close instead of in the page cache: a crash of the
// process loses it, as a crash of the machine loses an unsynced write
// from the page cache; the store commits without a sync only what it may
// lose (applies, which a replica replays from its log, and a non-voter's
// entries no vote vouches for).
//
// The file is written at explicit offsets from where it was opened
// (Pebble creates and reuses WALs for writing from their start).
type walFile struct {
	*fenceFile
	a  *asyncSyncer
	fd uintptr

	mu   sync.Mutex
	pend []byte // written by Pebble, not yet handed to the kernel
	off  int64  // the file offset pend starts at
}

// walPendRetained bounds the buffer a walFile keeps between syncs; a
// larger one, left by a burst, goes back to the garbage collector.
const walPendRetained = 1 << 20

// deferWrites returns f as a walFile when the store syncs through
// io_uring and f has a descriptor; otherwise f itself.
func (fs *fenceFS) deferWrites(f *fenceFile) vfs.File {
	if fs.async == nil {
		return f
	}
	fd := f.File.Fd()
	if fd == vfs.InvalidFd {
		return f
	}
	off, err := unix.Seek(int(fd), 0, 1 /* SEEK_CUR */)
	if err != nil {
		return f
	}
	return &walFile{fenceFile: f, a: fs.async, fd: fd, off: off}
}

func (w *walFile) Write(p []byte) (int, error) {
	if err := w.fs.guard(w.name); err != nil {
		return 0, err
	}
	w.mu.Lock()
	w.pend = append(w.pend, p...)
	w.mu.Unlock()
	if w.wal {
		w.written.Add(int64(len(p)))
	}
	return len(p), nil
}

// handOver writes what waits to the file, with a durable sync when sync
// is set (through io_uring: one linked write and fdatasync). w.mu is held.
func (w *walFile) handOver(sync bool) error {
	n := len(w.pend)
	var err error
	switch {
	case sync && n > 0:
		var done bool
		done, err = w.a.writeSync(w.fd, w.pend, w.off)
		if !done {
			// The kernel may still write this buffer later, at this
			// offset: it is never reused.
			buf := w.pend
			w.pend = nil
			if err == nil {
				err = pwriteAll(int(w.fd), buf, w.off)
			}
			if err == nil {
				err = unix.Fdatasync(int(w.fd))
			}
		}
	case sync:
		err = w.a.fdatasync(w.fd)
	case n > 0:
		err = pwriteAll(int(w.fd), w.pend, w.off)
	}
	if err != nil {
		return w.fs.observe(err)
	}
	w.off += int64(n)
	if cap(w.pend) > walPendRetained {
		w.pend = nil
	} else {
		w.pend = w.pend[:0]
	}
	return nil
}

// pwriteAll writes all of p at off.
func pwriteAll(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "pwrite", Path: "wal", Err: err}
		}
		if n == 0 {
			return fmt.Errorf("pwrite: %w", unix.EIO)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (w *walFile) SyncData() error {
	if err := w.fs.guard(w.name); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handOver(true)
}

// flush hands over what waits without a sync, for the calls that must
// see the file as Pebble wrote it.
func (w *walFile) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handOver(false)
}

func (w *walFile) Sync() error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.fenceFile.Sync()
}

func (w *walFile) SyncTo(length int64) (bool, error) {
	if err := w.flush(); err != nil {
		return false, err
	}
	return w.fenceFile.SyncTo(length)
}

func (w *walFile) WriteAt(p []byte, off int64) (int, error) {
	if err := w.flush(); err != nil {
		return 0, err
	}
	return w.fenceFile.WriteAt(p, off)
}

func (w *walFile) Read(p []byte) (int, error) {
	if err := w.flush(); err != nil {
		return 0, err
	}
	return w.fenceFile.Read(p)
}

func (w *walFile) ReadAt(p []byte, off int64) (int, error) {
	if err := w.flush(); err != nil {
		return 0, err
	}
	return w.fenceFile.ReadAt(p, off)
}

func (w *walFile) Stat() (vfs.FileInfo, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return w.fenceFile.Stat()
}

// Close hands over what waits, then closes the file. Pebble syncs a WAL
// before it closes it when the WAL holds synced commits.
func (w *walFile) Close() error {
	err := w.flush()
	if cerr := w.fenceFile.Close(); err == nil {
		err = cerr
	}
	return err
}
