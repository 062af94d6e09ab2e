package pebblestore

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Metrics returns the Pebble engine's metrics (levels, compactions,
// memtables, flushes, WAL, caches, disk usage), counted since the store
// opened; nil once Close has begun. It takes Pebble's mutex and its
// MANIFEST lock briefly and allocates one Metrics: cheap at a scrape's
// rate, not meant for every request.
func (s *Store) Metrics() *pebble.Metrics {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	if s.closed {
		return nil
	}
	return s.db.Metrics()
}

// DirUsage is the space the store's directory takes on disk, by kind of
// file, in bytes allocated (what du counts: a preallocated or zero-filled
// file counts whole, a sparse one only for what it holds; on a filesystem
// that does not report allocation, the files' sizes). The kinds add up to
// the directory's total.
type DirUsage struct {
	// Tables are Pebble's sstables (*.sst), live or awaiting deletion.
	Tables int64
	// BlobFiles are Pebble's value-separation blob files (*.blob).
	BlobFiles int64
	// WAL is Pebble's write-ahead logs (*.log), live and kept for
	// recycling.
	WAL int64
	// WALSpares is the zero-filled files prepared for the next WAL (see
	// Options.NoWALSpares).
	WALSpares int64
	// Manifest is Pebble's MANIFEST, OPTIONS, CURRENT, LOCK and marker
	// files.
	Manifest int64
	// Other is everything else in the directory: files the node keeps
	// next to the database, and Pebble's temporary files.
	Other int64
}

// Total is the directory's size on disk.
func (u DirUsage) Total() int64 {
	return u.Tables + u.BlobFiles + u.WAL + u.WALSpares + u.Manifest + u.Other
}

// DirUsage lists the store's directory and its WAL spares' and adds up
// the space of their files by kind. It costs a directory listing and a
// stat per file (a few dozen in a compacted store); files deleted
// meanwhile are skipped.
func (s *Store) DirUsage() (DirUsage, error) {
	var u DirUsage
	names, err := s.fs.List(s.dir)
	if err != nil {
		return u, fmt.Errorf("paxos: store directory usage: %w", err)
	}
	for _, name := range names {
		path := s.fs.PathJoin(s.dir, name)
		fi, err := s.fs.Stat(path)
		if err != nil {
			continue // deleted since the listing
		}
		if fi.IsDir() {
			n := s.dirBytes(path)
			if name == walSpareDir {
				u.WALSpares += n
			} else {
				u.Other += n
			}
			continue
		}
		*u.kind(name) += allocated(fi)
	}
	return u, nil
}

// kind returns the field of u that counts a file named name.
func (u *DirUsage) kind(name string) *int64 {
	switch {
	case strings.HasSuffix(name, ".sst"):
		return &u.Tables
	case strings.HasSuffix(name, ".blob"):
		return &u.BlobFiles
	case isWAL(name):
		return &u.WAL
	case strings.HasPrefix(name, "MANIFEST-"), strings.HasPrefix(name, "OPTIONS-"),
		strings.HasPrefix(name, "marker."), name == "CURRENT", name == "LOCK":
		return &u.Manifest
	default:
		return &u.Other
	}
}

// dirBytes adds up the space of the files in dir and its subdirectories.
func (s *Store) dirBytes(dir string) int64 {
	names, err := s.fs.List(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, name := range names {
		path := s.fs.PathJoin(dir, name)
		fi, err := s.fs.Stat(path)
		switch {
		case err != nil:
			continue // deleted since the listing
		case fi.IsDir():
			n += s.dirBytes(path)
		default:
			n += allocated(fi)
		}
	}
	return n
}

// allocated is the space fi's file takes on disk: its allocated blocks
// where the filesystem reports them, else its size.
func allocated(fi vfs.FileInfo) int64 {
	if n, ok := allocatedBlocks(fi); ok {
		return n
	}
	return fi.Size()
}
