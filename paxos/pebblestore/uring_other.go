//go:build !linux

package pebblestore

import (
	"errors"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// asyncSyncer is io_uring's fdatasync, which exists only on Linux.
type asyncSyncer struct{ log *slog.Logger }

func newAsyncSyncer(uint32) (*asyncSyncer, error) {
	return nil, errors.New("io_uring: Linux only")
}

func (*asyncSyncer) fdatasync(uintptr) error { return errors.New("io_uring: Linux only") }

func (*asyncSyncer) close() {}

// deferWrites returns f: WAL writes wait for the sync only where the
// store syncs through io_uring.
func (fs *fenceFS) deferWrites(f *fenceFile) vfs.File { return f }
