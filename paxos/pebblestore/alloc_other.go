//go:build !unix

package pebblestore

import "github.com/cockroachdb/pebble/v2/vfs"

// allocatedBlocks reports false: the store counts files by their size.
func allocatedBlocks(vfs.FileInfo) (int64, bool) { return 0, false }
