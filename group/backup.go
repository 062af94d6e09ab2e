package group

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/paxlock/paxlock/backup"
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// Backups: the lock service's side of a backup file (package backup is
// the format). A group's image is the state machine's keyspace (lock
// records, lock-delay records, namespace records, move records, the group
// version); the replication runtime's own keys and the cluster's member
// list are left out. Every record the state machine knows is checked as
// it is written and as it is read.

// BackupFormat is the version of the backup file format written.
const BackupFormat = backup.Format

// RestoredApplied is the applied instance a restored group starts from:
// its log starts right after it. It is not 0, so that a node of the new
// cluster started without the backup (empty, applied 0) cannot take the
// instances above it for a continuation of its empty state: it finds the
// log starting above what it has and fetches a snapshot.
const RestoredApplied = 1

// ErrBadBackup means a backup file is malformed, truncated, of another
// format, fails its checksum or holds a record the state machine cannot
// read. It is backup.ErrBad.
var ErrBadBackup = backup.ErrBad

// BackupHeader describes a backup (backup.Header).
type BackupHeader = backup.Header

// BackupGroup describes one group's image in a backup (backup.Group).
type BackupGroup = backup.Group

// BackupInfo is what a backup file holds (backup.Info).
type BackupInfo = backup.Info

// BackupVisitor receives a backup's contents as ReadBackup reads them
// (backup.Visitor).
type BackupVisitor = backup.Visitor

// BackupWriter writes a backup file of lock groups' images. It streams:
// at most one chunk of pairs is held at a time.
type BackupWriter struct {
	w   *backup.Writer
	buf []byte
}

// NewBackupWriter writes the magic line and header h (Format is set) to w.
func NewBackupWriter(w io.Writer, h BackupHeader) (*BackupWriter, error) {
	bw, err := backup.NewWriter(w, h)
	return &BackupWriter{w: bw}, err
}

// Group writes the next group's image from src (taken on the group's
// master when master), and returns what it wrote.
func (w *BackupWriter) Group(src paxos.SnapshotSource, master bool) (BackupGroup, error) {
	gi, err := w.w.StartGroup(src.Applied(), master)
	if err != nil {
		return BackupGroup{Group: gi, Applied: src.Applied(), Master: master}, err
	}
	for {
		chunk, last, err := src.Next()
		if err != nil {
			return BackupGroup{Group: gi}, fmt.Errorf("group: backup group %d: %w", gi, err)
		}
		w.buf = w.buf[:0]
		err = codec.EachPair(chunk, func(k, v []byte) error {
			if len(k) > 0 && k[0] == 0 {
				return nil // the runtime's (the member set): not the lock service's state
			}
			if clusterOwn(k) {
				return nil
			}
			if err := checkPair(k, v); err != nil {
				return err
			}
			w.buf = codec.AppendPair(w.buf, k, v)
			return nil
		})
		if err == nil {
			err = w.w.Pairs(w.buf)
		}
		if err != nil {
			return BackupGroup{Group: gi}, fmt.Errorf("group: backup group %d: %w", gi, err)
		}
		if last {
			break
		}
	}
	return w.w.EndGroup()
}

// Close writes the checksum and flushes. It fails unless every group of
// the header was written.
func (w *BackupWriter) Close() error {
	return w.w.Close()
}

// clusterOwn reports whether k is part of the cluster's member list (group
// 0: a member record or the list's initialised mark). A backup leaves it
// out, and a restore skips it: the restored cluster is another set of
// nodes, and its first master of group 0 seeds the list from the new
// configuration's nodes, as in any new cluster.
func clusterOwn(k []byte) bool {
	return systable.IsMemberKey(k)
}

// backupTables are the system tables a backup carries, which check their
// own pairs (CheckPair leaves the table alone); the member list is left
// out (clusterOwn).
var backupTables = []systable.Table{&systable.Namespaces{}, &systable.Quotas{}, &systable.Registry{}, &systable.Audit{}}

// checkPair checks a keyspace pair the lock service knows. Keys it does
// not know are kept as they are: a newer state machine's, which its Load
// reads. (The group version is checked by package backup, which counts
// it.)
func checkPair(k, v []byte) error {
	if len(k) == 0 {
		return nil
	}
	for _, t := range backupTables {
		if t.Claims(k) {
			if err := t.CheckPair(k, v); err != nil {
				return fmt.Errorf("%w: %w", ErrBadBackup, err)
			}
			return nil
		}
	}
	switch k[0] {
	case lockPrefix:
		if _, err := decodeRec(v); err != nil {
			return fmt.Errorf("lock %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case delayPrefix:
		if _, err := decodeDelayRecord(v); err != nil {
			return fmt.Errorf("lock-delay %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case revokePrefix:
		if _, err := decodeRevoked(v); err != nil {
			return fmt.Errorf("revoked holds %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	}
	if systable.IsMoveKey(k) {
		if err := systable.CheckMovePair(k, v); err != nil {
			return fmt.Errorf("move record %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	}
	return nil
}

// ReadBackup reads a whole backup from r with backup.Read, checking as
// well every record the state machine knows, and calls v along the way.
// The checksum is known good only when it returns nil: a caller that must
// not act on a bad file reads it twice, once to check and once to act.
func ReadBackup(r io.Reader, v BackupVisitor) (BackupInfo, error) {
	next := v.Pair
	v.Pair = func(g int, k, val []byte) error {
		if err := checkPair(k, val); err != nil {
			return err
		}
		if next != nil {
			return next(g, k, val)
		}
		return nil
	}
	return backup.Read(r, v)
}

// MaxGroupVersion is the highest group version a restore can raise a
// group to: a token keeps the version in its top 16 bits.
const MaxGroupVersion = 1<<16 - 1

// RestoreBackup writes the backup read from r into st, a new node's empty
// store, as the initial state of every lock group: each one's keyspace is the
// backup's image with the group version raised by one (so that every token
// granted after the restore is greater than every token in the backup:
// tokens are version<<48 | instance), and its applied instance
// RestoredApplied, the log starting after it. The holds in the backup are
// kept with their TTLs; a master's deadline for a hold starts when it
// takes the group, so they expire one TTL after the restored cluster
// elects its masters unless renewed or released. A key's lock-delay is
// restored too, and likewise lasts its full length from the moment the
// restored cluster's master takes the group.
//
// Read the file with ReadBackup first: RestoreBackup learns that the
// checksum is bad only at the end, when groups are written.
func RestoreBackup(r io.Reader, st paxos.Storage) (BackupInfo, error) {
	var (
		in  paxos.SnapshotInstall
		buf []byte
	)
	abort := func() {
		if in != nil {
			_ = in.Abort() // the group stays marked restoring: the node will not start on it
		}
	}
	info, err := ReadBackup(r, BackupVisitor{
		Pairs: func(g int, chunk []byte) error {
			if in == nil {
				var err error
				if in, err = st.BeginInstall(ID(g).ReplicaGroup()); err != nil {
					return err
				}
			}
			buf = buf[:0]
			_ = codec.EachPair(chunk, func(k, v []byte) error { // checked by ReadBackup
				if !bytes.Equal(k, versionKey) && !clusterOwn(k) {
					buf = codec.AppendPair(buf, k, v)
				}
				return nil
			})
			return in.AddChunk(buf)
		},
		GroupEnd: func(g BackupGroup) error {
			if g.Version >= MaxGroupVersion {
				return fmt.Errorf("%w: group %d: version %d cannot be raised", ErrBadBackup, g.Group, g.Version)
			}
			if in == nil {
				var err error
				if in, err = st.BeginInstall(ID(g.Group).ReplicaGroup()); err != nil {
					return err
				}
			}
			ver := binary.AppendUvarint(nil, g.Version+1)
			if err := in.AddChunk(codec.AppendPair(nil, versionKey, ver)); err != nil {
				return err
			}
			err := in.Finish(RestoredApplied)
			in = nil
			return err
		},
	})
	if err != nil {
		abort()
		return info, fmt.Errorf("group: restore: %w", err)
	}
	return info, nil
}
