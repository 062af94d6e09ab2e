package systable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/paxlock/paxlock/internal/codec"
)

// A namespace's move record, in every lock group that holds one ('v' +
// namespace): its state, the move's id, the other cluster's client
// addresses (a dropped namespace's), whether an abort restored it, the
// import batches the group applied and the highest mover token of a step
// applied:
//
//	1, state, id, movedTo, flags (bit 0: aborted), batches × (src, batch), fence
//
// Strings are uvarint-length-prefixed, numbers uvarints.

// movePrefix keys a namespace's move record: 'v' + namespace.
const movePrefix = 'v'

// moveRecVersion is the version byte of a move record.
const moveRecVersion = 1

// ErrBadMoveRecord means a move record, or a move step's data, does not
// decode.
var ErrBadMoveRecord = errors.New("systable: bad move record")

// MoveState is a namespace's move state in one lock group.
type MoveState uint8

// Move states.
const (
	MoveNone     MoveState = iota // no record: served as usual
	MoveIncoming                  // target before the flip: MOVING
	MoveFrozen                    // source after its freeze: MOVING
	MoveOwned                     // target after the flip: served
	MoveDropped                   // source after the drop: MOVED
)

var moveStateNames = [...]string{"none", "incoming", "frozen", "owned", "dropped"}

// String returns the state's name as the admin API shows it.
func (s MoveState) String() string {
	if int(s) < len(moveStateNames) {
		return moveStateNames[s]
	}
	return fmt.Sprintf("MoveState(%d)", s)
}

// batchID names an import batch: the source group and its batch number.
type batchID struct {
	src   uint32
	batch uint32
}

// moveRec is a namespace's move record in one group.
type moveRec struct {
	st      MoveState
	id      string
	movedTo string // dropped: the target's client addresses, comma-separated
	// aborted: a tombstone restored by the abort of move id (the
	// namespace had moved away before and was moving back), so that the
	// abort repeated succeeds.
	aborted bool
	batches map[batchID]struct{}
	// fence is the highest mover-lock token of a step applied: a step
	// with a lower one is refused, so that a driver that stalled past its
	// lock's lease cannot freeze, unfreeze or drop the namespace behind
	// the back of the driver that took over. A record in state none
	// keeps only the fence (the namespace is served as usual).
	fence uint64
}

// IsMoveKey reports whether k is a move record's key.
func IsMoveKey(k []byte) bool { return len(k) > 0 && k[0] == movePrefix }

// CheckMovePair checks a move record (IsMoveKey) as a backup holds it.
func CheckMovePair(_, v []byte) error {
	_, err := decodeMoveRec(v)
	return err
}

func encodeMoveRec(dst []byte, r *moveRec) []byte {
	dst = append(dst, moveRecVersion, byte(r.st))
	dst = appendStr(dst, r.id)
	dst = appendStr(dst, r.movedTo)
	var flags byte
	if r.aborted {
		flags |= 1
	}
	dst = append(dst, flags)
	bs := make([]batchID, 0, len(r.batches))
	for b := range r.batches {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b batchID) int {
		if a.src != b.src {
			return int(a.src) - int(b.src)
		}
		return int(a.batch) - int(b.batch)
	})
	dst = binary.AppendUvarint(dst, uint64(len(bs)))
	for _, b := range bs {
		dst = binary.AppendUvarint(dst, uint64(b.src))
		dst = binary.AppendUvarint(dst, uint64(b.batch))
	}
	return binary.AppendUvarint(dst, r.fence)
}

// readU32 reads a uvarint that must fit 32 bits.
func readU32(r *codec.Reader) uint32 {
	v := r.Uvarint()
	if v > 1<<32-1 {
		r.Fail()
		return 0
	}
	return uint32(v)
}

func decodeMoveRec(b []byte) (*moveRec, error) {
	r := codec.NewReader(b)
	if r.Byte() != moveRecVersion {
		return nil, fmt.Errorf("group: move record version: %w", ErrBadMoveRecord)
	}
	m := &moveRec{st: MoveState(r.Byte())}
	m.id = string(r.Bytes(r.Uvarint()))
	m.movedTo = string(r.Bytes(r.Uvarint()))
	flags := r.Byte()
	m.aborted = flags&1 != 0
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		return nil, ErrBadMoveRecord
	}
	for i := uint64(0); i < n && !r.Failed(); i++ {
		if m.batches == nil {
			m.batches = make(map[batchID]struct{})
		}
		m.batches[batchID{src: readU32(&r), batch: readU32(&r)}] = struct{}{}
	}
	m.fence = r.Uvarint()
	if !r.Done() || m.st > MoveDropped || (m.st == MoveNone && m.fence == 0) || flags&^1 != 0 {
		return nil, ErrBadMoveRecord
	}
	return m, nil
}

// EncodeMoveData returns a move step's data: the move's id, then rest
// (a drop's target addresses, an import's batch).
func EncodeMoveData(id string, rest []byte) []byte {
	b := appendStr(make([]byte, 0, len(id)+len(rest)+binary.MaxVarintLen64), id)
	return append(b, rest...)
}

// EncodeImportBatch returns an import step's rest: the source group and
// batch number, then the batch's pairs.
func EncodeImportBatch(src, batch uint32, pairs []byte) []byte {
	data := binary.AppendUvarint(nil, uint64(src))
	data = binary.AppendUvarint(data, uint64(batch))
	return append(data, pairs...)
}

// splitMoveData reads the id EncodeMoveData put first and returns the
// rest.
func splitMoveData(b []byte) (id string, rest []byte, ok bool) {
	r := codec.NewReader(b)
	id = string(r.Bytes(r.Uvarint()))
	return id, r.Rest(), !r.Failed()
}
