package systable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/paxlock/paxlock/internal/codec"
)

// An audit record is a pair of group 0's keyspace: 'a' + its sequence
// number (8 bytes, big-endian, so that the keyspace's order is the
// records' order) -> the record:
//
//	rec  = 1, instance uvarint, timeMs uvarint, node uvarint,
//	       actor, source, action, namespace, target, outcome
//	text = len uvarint, bytes (at most MaxAuditText)
//
// An audit command's data is keep uvarint followed by a record whose
// sequence number and instance the apply fills in.

const (
	auditPrefix = 'a'
	auditRecV1  = 1
	// MaxAuditText bounds each text field of an audit record; a longer
	// one is cut (AuditRecord.Clip) before it is proposed.
	MaxAuditText = 1024
	// DefaultAuditKeep is how many audit records group 0 keeps when the
	// configuration says nothing.
	DefaultAuditKeep = 10000
	// MaxAuditKeep bounds the records kept.
	MaxAuditKeep = 1 << 20
)

// ErrBadAuditRecord means an audit record or command does not decode.
var ErrBadAuditRecord = errors.New("systable: bad audit record")

// AuditRecord is one change made through the admin API (or by the node
// itself), as group 0 keeps it.
type AuditRecord struct {
	// Seq is the record's place in the log, the same on every replica
	// (set when it is applied, from 1).
	Seq uint64
	// Instance is the group 0 instance it was chosen at.
	Instance uint64
	// TimeMs is the proposer's wall clock, Unix milliseconds: it orders
	// nothing (Seq does) and is as right as that node's clock.
	TimeMs int64
	// Node is the node that served the change.
	Node uint32
	// Actor is who asked: "admin token", a client certificate's subject,
	// or "node N" for a node's own action.
	Actor string
	// Source is the request's remote address ("" for a node's own).
	Source string
	// Action names the change: force_unlock, namespace_put, quota_set...
	Action string
	// Namespace and Target are what it changed (a namespace; a key, a
	// member id, a cluster...), either possibly "".
	Namespace string
	Target    string
	// Outcome is "ok" or what went wrong.
	Outcome string
}

// Clip cuts every text field to MaxAuditText bytes.
func (r *AuditRecord) Clip() {
	for _, s := range r.texts() {
		if len(*s) > MaxAuditText {
			*s = (*s)[:MaxAuditText]
		}
	}
}

func (r *AuditRecord) texts() []*string {
	return []*string{&r.Actor, &r.Source, &r.Action, &r.Namespace, &r.Target, &r.Outcome}
}

// EncodeAuditRecord returns r's record (Seq is the key's, not the
// record's).
func EncodeAuditRecord(r AuditRecord) []byte {
	b := []byte{auditRecV1}
	b = binary.AppendUvarint(b, r.Instance)
	b = binary.AppendUvarint(b, uint64(max(r.TimeMs, 0)))
	b = binary.AppendUvarint(b, uint64(r.Node))
	for _, s := range r.texts() {
		b = binary.AppendUvarint(b, uint64(len(*s)))
		b = append(b, *s...)
	}
	return b
}

// DecodeAuditRecord decodes a record, all of b (Seq is left 0).
func DecodeAuditRecord(b []byte) (AuditRecord, error) {
	r := codec.NewReader(b)
	rec, err := readAuditRecord(&r)
	if err != nil || !r.Done() {
		return AuditRecord{}, ErrBadAuditRecord
	}
	return rec, nil
}

func readAuditRecord(r *codec.Reader) (AuditRecord, error) {
	var rec AuditRecord
	if r.Byte() != auditRecV1 {
		return AuditRecord{}, ErrBadAuditRecord
	}
	rec.Instance = r.Uvarint()
	t := r.Uvarint()
	node := r.Uvarint()
	if t > math.MaxInt64 || node > math.MaxUint32 {
		return AuditRecord{}, ErrBadAuditRecord
	}
	rec.TimeMs, rec.Node = int64(t), uint32(node)
	for _, s := range rec.texts() {
		n := r.Uvarint()
		if n > MaxAuditText {
			return AuditRecord{}, ErrBadAuditRecord
		}
		*s = string(r.Bytes(n))
	}
	if r.Failed() {
		return AuditRecord{}, ErrBadAuditRecord
	}
	return rec, nil
}

// EncodeAuditCommand returns an audit command's data: keep the last keep
// records (clamped to 1..MaxAuditKeep) once r is appended.
func EncodeAuditCommand(keep int, r AuditRecord) []byte {
	keep = min(max(keep, 1), MaxAuditKeep)
	r.Clip()
	return append(binary.AppendUvarint(nil, uint64(keep)), EncodeAuditRecord(r)...)
}

// DecodeAuditCommand decodes an audit command's data, all of b.
func DecodeAuditCommand(b []byte) (keep int, r AuditRecord, err error) {
	rd := codec.NewReader(b)
	k := rd.Uvarint()
	if k < 1 || k > MaxAuditKeep {
		return 0, AuditRecord{}, ErrBadAuditRecord
	}
	r, err = readAuditRecord(&rd)
	if err != nil || !rd.Done() {
		return 0, AuditRecord{}, ErrBadAuditRecord
	}
	return int(k), r, nil
}

// AuditKey is audit record seq's key.
func AuditKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{auditPrefix}, seq)
}

// IsAuditKey reports whether k is an audit record's key.
func IsAuditKey(k []byte) bool { return len(k) > 0 && k[0] == auditPrefix }

// auditSeq returns the sequence number of audit key k.
func auditSeq(k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != auditPrefix {
		return 0, fmt.Errorf("%w: key %x", ErrBadAuditRecord, k)
	}
	seq := binary.BigEndian.Uint64(k[1:])
	if seq == 0 {
		return 0, fmt.Errorf("%w: sequence 0", ErrBadAuditRecord)
	}
	return seq, nil
}
