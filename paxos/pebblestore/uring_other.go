//go:build !linux

package pebblestore

import (
	"errors"
	"log/slog"
)

// asyncSyncer is io_uring's fdatasync, which exists only on Linux.
type asyncSyncer struct{ log *slog.Logger }

func newAsyncSyncer(uint32) (*asyncSyncer, error) {
	return nil, errors.New("io_uring: Linux only")
}

func (*asyncSyncer) fdatasync(uintptr) error { return errors.New("io_uring: Linux only") }

func (*asyncSyncer) close() {}
