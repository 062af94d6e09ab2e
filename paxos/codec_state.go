package paxos

import (
	"encoding/binary"
	"fmt"
)

// The encodings of the state a runtime and its Storage persist beside the
// log (codec.go has those of log entries and messages): an acceptor's hard
// state, a member set, and the key/value pairs of a snapshot chunk.

const (
	// hardStateVersion is the first byte of an encoded hard state.
	hardStateVersion = 1
	// membersVersion is the first byte of an encoded member set.
	membersVersion = 1
)

// AppendHardState appends the encoding of hs to dst, the form in which a
// Storage records an acceptor's hard state:
//
//	u8 version | uvarint round | uvarint node | uvarint committed
func AppendHardState(dst []byte, hs HardState) []byte {
	dst = append(dst, hardStateVersion)
	dst = appendBallot(dst, hs.Promised)
	return binary.AppendUvarint(dst, hs.Committed)
}

// DecodeHardState decodes what AppendHardState wrote; malformed input
// yields an error matching ErrCorrupt.
func DecodeHardState(b []byte) (HardState, error) {
	d := wireDecoder{b: b}
	if v := d.byte1("hard state version"); d.err == nil && v != hardStateVersion {
		d.fail("unknown hard state version %d", v)
	}
	hs := HardState{Promised: d.ballot("promised")}
	hs.Committed = d.uvarint("committed")
	d.end()
	if d.err != nil {
		return HardState{}, d.err
	}
	return hs, nil
}

// AppendMembership appends the encoding of m to dst, the form in which a
// runtime records a member set:
//
//	u8 version | uvarint len(members) | uvarint id... | uvarint len(removed) | uvarint id...
func AppendMembership(dst []byte, m Membership) []byte {
	dst = append(dst, membersVersion)
	dst = binary.AppendUvarint(dst, uint64(len(m.Members)))
	for _, id := range m.Members {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Removed)))
	for _, id := range m.Removed {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

// DecodeMembership decodes what AppendMembership wrote; malformed input
// yields an error matching ErrCorrupt.
func DecodeMembership(b []byte) (Membership, error) {
	d := wireDecoder{b: b}
	if v := d.byte1("members version"); d.err == nil && v != membersVersion {
		d.fail("unknown members version %d", v)
	}
	var m Membership
	for _, list := range []*[]NodeID{&m.Members, &m.Removed} {
		n := d.count("member count", 1)
		for range n {
			id := d.uint32v("member id")
			if d.err == nil && id == 0 {
				d.fail("member id 0")
			}
			*list = append(*list, NodeID(id))
		}
	}
	d.end()
	if d.err != nil {
		return Membership{}, d.err
	}
	if len(m.Members) == 0 {
		return Membership{}, fmt.Errorf("%w: member set without members", ErrCorrupt)
	}
	return m, nil
}

// DecodeChunk calls fn with each key/value pair of a snapshot chunk, in
// order; a chunk is a run of pairs, each encoded as
//
//	uvarint len(key) | key | uvarint len(value) | value
//
// as a Storage's SnapshotSource writes them. A malformed chunk yields an
// error matching ErrCorrupt once fn has seen the pairs before the damage;
// an error from fn ends the decoding and is returned as is. key and value
// alias chunk.
func DecodeChunk(chunk []byte, fn func(key, value []byte) error) error {
	d := wireDecoder{b: chunk}
	for d.off < len(chunk) && d.err == nil {
		kn := d.count("snapshot key length", 1)
		k := chunk[d.off : d.off+kn]
		d.off += kn
		vn := d.count("snapshot value length", 1)
		if d.err != nil {
			break
		}
		v := chunk[d.off : d.off+vn]
		d.off += vn
		if err := fn(k, v); err != nil {
			d.err = err
		}
	}
	return d.err
}
