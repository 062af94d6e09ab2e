//go:build unix

package pebblestore

import (
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// allocatedBlocks returns the bytes of the blocks the filesystem
// allocated to fi's file (st_blocks, in 512-byte units), when fi comes
// from the operating system.
func allocatedBlocks(fi vfs.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int64(st.Blocks) * 512, true // Blocks is not int64 on every platform
}
