package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Format is the version of the backup file format written.
const Format = 1

// magic opens every backup file.
const magic = "PAXLOCK BACKUP\n"

// maxRecord bounds one record's payload (a chunk of pairs is about
// 1 MiB; a pair larger than that gets a chunk of its own).
const maxRecord = 64 << 20

// Record types.
const (
	recHeader     = 'H'
	recGroupStart = 'G'
	recPairs      = 'P'
	recGroupEnd   = 'E'
	recTrailer    = 'Z'
)

// The keys a group's end record counts. They are the lock service's
// keyspace layout (package group's lock table and group version), fixed
// by the format: a backup written by one build is read by the next.
const (
	// LockPrefix opens a lock record's key ('l' + full key).
	LockPrefix = 'l'
)

// VersionKey is the group version's key; its value is a uvarint.
var VersionKey = []byte("mversion")

// ErrBad means a backup file is malformed, truncated, of another format
// or fails its checksum.
var ErrBad = errors.New("backup: bad backup file")

// Header describes a backup.
type Header struct {
	Format  int       `json:"format"`
	Cluster string    `json:"cluster"`
	Time    time.Time `json:"time"`
	Node    uint32    `json:"node"`   // the node that wrote it
	Commit  string    `json:"commit"` // that node's build (module version and VCS revision)
	Groups  int       `json:"groups"` // the number of lock groups
}

// Group describes one group's image in a backup.
type Group struct {
	Group   int    `json:"group"`
	Applied uint64 `json:"applied"`                 // the instance the image reflects
	Master  bool   `json:"master"`                  // taken on the group's master
	Version uint64 `json:"group_version,omitempty"` // the group version (in the end record)
	Locks   int64  `json:"locks,omitempty"`         // held keys (in the end record)
	Pairs   int64  `json:"pairs,omitempty"`         // keyspace pairs (in the end record)
}

// Info is what a backup file holds, as Read found it.
type Info struct {
	Header Header
	Groups []Group
	Sum    [sha256.Size]byte
}

// count counts the pair k, v into g: every pair, the lock records, and
// the group version.
func (g *Group) count(k, v []byte) error {
	g.Pairs++
	switch {
	case len(k) > 0 && k[0] == LockPrefix:
		g.Locks++
	case bytes.Equal(k, VersionKey):
		ver, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("group version: %w", ErrBad)
		}
		g.Version = ver
	}
	return nil
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBad, fmt.Sprintf(format, a...))
}
