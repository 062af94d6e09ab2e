package group

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/paxlock/paxlock/paxos"
)

// Backups.
//
// A backup is a set of per-group consistent cuts: each lock group's
// state-machine image (its lock table, group 0's also the namespace table)
// exactly as it was after one applied instance, with that instance and the
// group version. Groups are independent (no operation spans two), so there
// is no instant at which the whole cluster is cut, and none is needed.
//
// The file is a magic line followed by records, each a type byte, a
// uvarint payload length and the payload:
//
//	'H' header, JSON (BackupHeader)
//	per group, in order 0, 1, ...:
//	  'G' group start, JSON (BackupGroup: group, applied)
//	  'P' zero or more chunks of pairs: uvarint len, key, uvarint len, value
//	  'E' group end, JSON (BackupGroup: group, applied, version, locks, pairs)
//	'Z' SHA-256 of every byte of the file before this record
//
// and nothing after the 'Z' record. The pairs are the state machine's
// keyspace (lock records, lock-delay records, namespace records, move
// records, the group version); the
// replication runtime's own keys (the member set) are left out.

// BackupFormat is the version of the backup file format written.
const BackupFormat = 1

// backupMagic opens every backup file.
const backupMagic = "PAXLOCK BACKUP\n"

// RestoredApplied is the applied instance a restored group starts from:
// its log starts right after it. It is not 0, so that a node of the new
// cluster started without the backup (empty, applied 0) cannot take the
// instances above it for a continuation of its empty state: it finds the
// log starting above what it has and fetches a snapshot.
const RestoredApplied = 1

// maxBackupRecord bounds one record's payload (a chunk of pairs is about
// 1 MiB; a pair larger than that gets a chunk of its own).
const maxBackupRecord = 64 << 20

// Record types.
const (
	recHeader     = 'H'
	recGroupStart = 'G'
	recPairs      = 'P'
	recGroupEnd   = 'E'
	recTrailer    = 'Z'
)

// ErrBadBackup means a backup file is malformed, truncated, of another
// format or fails its checksum.
var ErrBadBackup = errors.New("group: bad backup file")

// BackupHeader describes a backup.
type BackupHeader struct {
	Format  int       `json:"format"`
	Cluster string    `json:"cluster"`
	Time    time.Time `json:"time"`
	Node    uint32    `json:"node"`   // the node that wrote it
	Commit  string    `json:"commit"` // that node's build (module version and VCS revision)
	Groups  int       `json:"groups"` // the number of lock groups
}

// BackupGroup describes one group's image in a backup.
type BackupGroup struct {
	Group   int    `json:"group"`
	Applied uint64 `json:"applied"`                 // the instance the image reflects
	Master  bool   `json:"master"`                  // taken on the group's master
	Version uint64 `json:"group_version,omitempty"` // the group version (in the end record)
	Locks   int64  `json:"locks,omitempty"`         // held keys (in the end record)
	Pairs   int64  `json:"pairs,omitempty"`         // keyspace pairs (in the end record)
}

// BackupInfo is what a backup file holds, as ReadBackup found it.
type BackupInfo struct {
	Header BackupHeader
	Groups []BackupGroup
	Sum    [sha256.Size]byte
}

// BackupWriter writes a backup file. It streams: at most one chunk of
// pairs is held at a time.
type BackupWriter struct {
	bw    *bufio.Writer
	h     hash.Hash
	hdr   BackupHeader
	next  int // the next group to write
	buf   []byte
	err   error
	wrote bool
}

// NewBackupWriter writes the magic line and header h (Format is set) to w.
func NewBackupWriter(w io.Writer, h BackupHeader) (*BackupWriter, error) {
	h.Format = BackupFormat
	bw := &BackupWriter{bw: bufio.NewWriterSize(w, 256<<10), h: sha256.New(), hdr: h}
	bw.raw([]byte(backupMagic))
	bw.json(recHeader, h)
	return bw, bw.err
}

func (w *BackupWriter) raw(b []byte) {
	if w.err != nil {
		return
	}
	w.h.Write(b)
	_, w.err = w.bw.Write(b)
}

func (w *BackupWriter) record(typ byte, payload []byte) {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = typ
	n := binary.PutUvarint(hdr[1:], uint64(len(payload)))
	w.raw(hdr[:1+n])
	w.raw(payload)
}

func (w *BackupWriter) json(typ byte, v any) {
	b, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.record(typ, b)
}

// Group writes the next group's image from src (taken on the group's
// master when master), and returns what it wrote.
func (w *BackupWriter) Group(src paxos.SnapshotSource, master bool) (BackupGroup, error) {
	g := BackupGroup{Group: w.next, Applied: src.Applied(), Master: master}
	if w.next >= w.hdr.Groups {
		return g, fmt.Errorf("group: backup: group %d of %d", w.next, w.hdr.Groups)
	}
	w.next++
	w.json(recGroupStart, g)
	for w.err == nil {
		chunk, last, err := src.Next()
		if err != nil {
			return g, fmt.Errorf("group: backup group %d: %w", g.Group, err)
		}
		w.buf = w.buf[:0]
		err = eachPair(chunk, func(k, v []byte) error {
			if len(k) > 0 && k[0] == 0 {
				return nil // the runtime's (the member set): not the lock service's state
			}
			if clusterOwn(k) {
				return nil
			}
			if err := checkPair(&g, k, v); err != nil {
				return err
			}
			w.buf = appendPair(w.buf, k, v)
			return nil
		})
		if err != nil {
			return g, fmt.Errorf("group: backup group %d: %w", g.Group, err)
		}
		if len(w.buf) > 0 {
			w.record(recPairs, w.buf)
		}
		if last {
			break
		}
	}
	w.json(recGroupEnd, g)
	return g, w.err
}

// Close writes the checksum and flushes. It fails unless every group of
// the header was written.
func (w *BackupWriter) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.wrote {
		return errors.New("group: backup: closed twice")
	}
	w.wrote = true
	if w.next != w.hdr.Groups {
		return fmt.Errorf("group: backup: %d of %d groups written", w.next, w.hdr.Groups)
	}
	w.record(recTrailer, w.h.Sum(nil))
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	return w.err
}

// clusterOwn reports whether k is part of the cluster's member list (group
// 0: a member record or the list's initialised mark). A backup leaves it
// out, and a restore skips it: the restored cluster is another set of
// nodes, and its first master of group 0 seeds the list from the new
// configuration's nodes, as in any new cluster.
func clusterOwn(k []byte) bool {
	return (len(k) > 0 && k[0] == memberPrefix) || bytes.Equal(k, memberInitKey)
}

func appendPair(dst, k, v []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// eachPair calls f for every pair of a chunk.
func eachPair(chunk []byte, f func(k, v []byte) error) error {
	r := reader{b: chunk}
	for len(r.b) > 0 {
		k := r.bytes(r.uvarint())
		v := r.bytes(r.uvarint())
		if r.err {
			return fmt.Errorf("pairs: %w", ErrBadBackup)
		}
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkPair checks a keyspace pair the lock service knows and counts it
// into g. Keys it does not know are kept as they are: a newer state
// machine's, which its Load reads.
func checkPair(g *BackupGroup, k, v []byte) error {
	g.Pairs++
	switch {
	case len(k) > 0 && k[0] == lockPrefix:
		if _, err := decodeRec(v); err != nil {
			return fmt.Errorf("lock %q: %w: %w", k[1:], ErrBadBackup, err)
		}
		g.Locks++
	case len(k) > 0 && k[0] == delayPrefix:
		if _, err := decodeDelayRecord(v); err != nil {
			return fmt.Errorf("lock-delay %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case len(k) > 0 && k[0] == revokePrefix:
		if _, err := decodeRevoked(v); err != nil {
			return fmt.Errorf("revoked holds %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case len(k) > 0 && k[0] == nsPrefix:
		if _, err := parseNSRec(v); err != nil {
			return fmt.Errorf("namespace %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case len(k) > 0 && k[0] == movePrefix:
		if _, err := decodeMoveRec(v); err != nil {
			return fmt.Errorf("move record %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case len(k) > 0 && k[0] == regPrefix:
		if err := checkRegPair(k, v); err != nil {
			return fmt.Errorf("registry record %q: %w", k, err)
		}
	case len(k) > 0 && k[0] == quotaPrefix:
		if _, err := decodeQuota(v); err != nil {
			return fmt.Errorf("quota of namespace %q: %w: %w", k[1:], ErrBadBackup, err)
		}
	case bytes.Equal(k, versionKey):
		ver, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("group version: %w", ErrBadBackup)
		}
		g.Version = ver
	}
	return nil
}

// BackupVisitor receives a backup's contents as ReadBackup reads them.
// Any function may be nil; an error it returns ends the read.
type BackupVisitor struct {
	Header func(h BackupHeader) error
	// Pairs gets a chunk of group g's pairs (valid during the call).
	Pairs func(g int, chunk []byte) error
	// GroupEnd gets a group once all its pairs were read and checked.
	GroupEnd func(g BackupGroup) error
}

// ReadBackup reads a whole backup from r, checks its format, structure,
// records and checksum, and calls v along the way. The checksum is known
// good only when it returns nil: a caller that must not act on a bad file
// reads it twice, once to check and once to act.
func ReadBackup(r io.Reader, v BackupVisitor) (BackupInfo, error) {
	var info BackupInfo
	rr := recordReader{br: bufio.NewReaderSize(r, 256<<10), h: sha256.New()}
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(rr.br, magic); err != nil || string(magic) != backupMagic {
		return info, badBackup("not a paxlock backup (no %q line)", backupMagic[:len(backupMagic)-1])
	}
	rr.h.Write(magic)
	typ, p, err := rr.next()
	if err != nil {
		return info, err
	}
	if typ != recHeader {
		return info, badBackup("record %q where the header belongs", typ)
	}
	var format struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(p, &format); err != nil {
		return info, badBackup("header: %v", err)
	}
	if format.Format != BackupFormat {
		return info, badBackup("format %d; this build reads format %d", format.Format, BackupFormat)
	}
	if err := json.Unmarshal(p, &info.Header); err != nil {
		return info, badBackup("header: %v", err)
	}
	if info.Header.Groups <= 0 || info.Header.Groups > 1<<16 {
		return info, badBackup("header: %d groups", info.Header.Groups)
	}
	if v.Header != nil {
		if err := v.Header(info.Header); err != nil {
			return info, err
		}
	}
	for gi := 0; gi < info.Header.Groups; gi++ {
		g, err := readGroup(&rr, gi, v)
		if err != nil {
			return info, err
		}
		info.Groups = append(info.Groups, g)
	}
	sum := rr.h.Sum(nil)
	typ, p, err = rr.next()
	if err != nil {
		return info, err
	}
	if typ != recTrailer {
		return info, badBackup("record %q after the last group", typ)
	}
	if !bytes.Equal(p, sum) {
		return info, badBackup("checksum mismatch: the file is corrupt")
	}
	copy(info.Sum[:], sum)
	if _, err := rr.br.ReadByte(); err != io.EOF {
		return info, badBackup("data after the checksum")
	}
	return info, nil
}

func badBackup(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadBackup, fmt.Sprintf(format, a...))
}

// readGroup reads group gi's records.
func readGroup(rr *recordReader, gi int, v BackupVisitor) (BackupGroup, error) {
	typ, p, err := rr.next()
	if err != nil {
		return BackupGroup{}, err
	}
	var start BackupGroup
	if typ != recGroupStart {
		return start, badBackup("record %q where group %d starts", typ, gi)
	}
	if err := json.Unmarshal(p, &start); err != nil || start.Group != gi {
		return start, badBackup("group %d start record", gi)
	}
	seen := BackupGroup{Group: gi, Applied: start.Applied, Master: start.Master}
	for {
		typ, p, err := rr.next()
		if err != nil {
			return seen, err
		}
		switch typ {
		case recPairs:
			if err := eachPair(p, func(k, val []byte) error { return checkPair(&seen, k, val) }); err != nil {
				return seen, fmt.Errorf("group %d: %w", gi, err)
			}
			if v.Pairs != nil {
				if err := v.Pairs(gi, p); err != nil {
					return seen, err
				}
			}
		case recGroupEnd:
			var end BackupGroup
			if err := json.Unmarshal(p, &end); err != nil {
				return seen, badBackup("group %d end record: %v", gi, err)
			}
			if end != seen {
				return seen, badBackup("group %d: end record %+v, contents %+v", gi, end, seen)
			}
			if v.GroupEnd != nil {
				if err := v.GroupEnd(seen); err != nil {
					return seen, err
				}
			}
			return seen, nil
		default:
			return seen, badBackup("record %q inside group %d", typ, gi)
		}
	}
}

// recordReader reads records and hashes the bytes it consumed (bufio's
// read-ahead is not hashed until consumed).
type recordReader struct {
	br      *bufio.Reader
	h       hash.Hash
	payload []byte
}

// next reads a record; its payload is valid until the next call. The
// trailer record is not hashed (its payload is the hash).
func (rr *recordReader) next() (byte, []byte, error) {
	typ, err := rr.br.ReadByte()
	if err != nil {
		return 0, nil, badBackup("truncated (no checksum record)")
	}
	n, err := binary.ReadUvarint(rr.br)
	if err != nil || n > maxBackupRecord {
		return 0, nil, badBackup("record %q: bad length", typ)
	}
	if uint64(cap(rr.payload)) < n {
		rr.payload = make([]byte, n)
	}
	p := rr.payload[:n]
	if _, err := io.ReadFull(rr.br, p); err != nil {
		return 0, nil, badBackup("truncated record %q", typ)
	}
	if typ != recTrailer {
		var hdr [1 + binary.MaxVarintLen64]byte
		hdr[0] = typ
		hn := binary.PutUvarint(hdr[1:], n)
		rr.h.Write(hdr[:1+hn])
		rr.h.Write(p)
	}
	return typ, p, nil
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
				if in, err = st.BeginInstall(ReplicationID(g)); err != nil {
					return err
				}
			}
			buf = buf[:0]
			_ = eachPair(chunk, func(k, v []byte) error { // checked by ReadBackup
				if !bytes.Equal(k, versionKey) && !clusterOwn(k) {
					buf = appendPair(buf, k, v)
				}
				return nil
			})
			return in.AddChunk(buf)
		},
		GroupEnd: func(g BackupGroup) error {
			if g.Version >= MaxGroupVersion {
				return badBackup("group %d: version %d cannot be raised", g.Group, g.Version)
			}
			if in == nil {
				var err error
				if in, err = st.BeginInstall(ReplicationID(g.Group)); err != nil {
					return err
				}
			}
			ver := binary.AppendUvarint(nil, g.Version+1)
			if err := in.AddChunk(appendPair(nil, versionKey, ver)); err != nil {
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
