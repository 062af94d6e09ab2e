package paxos

import (
	"encoding/binary"
	"fmt"
)

// membersVersion is the first byte of the encoded set.
const membersVersion = 1

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
