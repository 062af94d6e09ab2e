package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"

	"github.com/paxlock/paxlock/client/wire"
)

// Metadata format constants.
const (
	// MetaVersion is the first byte of every encoded NodeMeta. A decoder
	// refuses other values; fields added later are appended after the
	// current ones (decoders skip trailing bytes) and do not change it.
	MetaVersion = 1
	// MaxMetaSize is memberlist's limit on a node's metadata (memberlist
	// panics beyond it). EncodeMeta never returns more.
	MaxMetaSize = memberlist.MetaMaxSize
	// MaxAddrLen is the longest address NodeMeta can carry.
	MaxAddrLen = 255
)

// Metadata flag bits (the encoding's second byte).
const (
	flagGroupsTruncated = 1 << 0
	flagLeaving         = 1 << 1
)

// Metadata errors.
var (
	// ErrMetaTooLarge reports metadata that does not fit MaxMetaSize even
	// without its group list (addresses too long).
	ErrMetaTooLarge = errors.New("gossip: node metadata too large")
	// ErrBadMeta reports metadata that cannot be encoded (zero id, a group
	// out of range) or bytes that do not decode.
	ErrBadMeta = errors.New("gossip: bad node metadata")
)

// GroupEpoch is one group a node masters, with the epoch of that
// mastership (the ballot round the view calls Epoch).
type GroupEpoch struct {
	// Group is the group number, 0 to wire.MaxViewGroups-1.
	Group int
	// Epoch rises with every change of the group's master.
	Epoch uint64
}

// NodeMeta is what a node gossips about itself. It is a hint: the group
// list says which groups the node believed it mastered when it last
// updated, nothing more.
type NodeMeta struct {
	// ID is the node id, nonzero. Membership sets it from its Config.
	ID uint32
	// ClientAddr is where the node serves the client protocol, host:port.
	ClientAddr string
	// PeerAddr is where the node takes Paxos traffic, host:port.
	PeerAddr string
	// Groups lists the groups the node masters, with their epochs.
	Groups []GroupEpoch
	// GroupsTruncated reports that Groups did not fit the metadata limit
	// and was dropped; read masters from the cluster view instead. Set by
	// encoding, ignored on input.
	GroupsTruncated bool
	// Leaving reports that the node is leaving gracefully. Set by
	// Membership.Leave, ignored by UpdateMeta.
	Leaving bool
}

// EncodeMeta encodes m compactly: a version byte, a flags byte, then the
// id, the two addresses and the groups as uvarints and length-prefixed
// strings. If the result would exceed MaxMetaSize it drops the group list,
// sets the GroupsTruncated flag and reports truncated. It fails with
// ErrMetaTooLarge if even that does not fit, and with ErrBadMeta for a zero
// id or a group out of range.
func EncodeMeta(m NodeMeta) (b []byte, truncated bool, err error) {
	if m.ID == 0 {
		return nil, false, fmt.Errorf("%w: zero node id", ErrBadMeta)
	}
	if len(m.ClientAddr) > MaxAddrLen || len(m.PeerAddr) > MaxAddrLen {
		return nil, false, fmt.Errorf("%w: address longer than %d bytes", ErrMetaTooLarge, MaxAddrLen)
	}
	for _, g := range m.Groups {
		if g.Group < 0 || g.Group >= wire.MaxViewGroups {
			return nil, false, fmt.Errorf("%w: group %d out of range", ErrBadMeta, g.Group)
		}
	}
	groups := slices.Clone(m.Groups)
	slices.SortFunc(groups, func(a, b GroupEpoch) int { return a.Group - b.Group })

	var flags byte
	if m.Leaving {
		flags |= flagLeaving
	}
	b = make([]byte, 0, 64+len(groups)*6)
	b = append(b, MetaVersion, flags)
	b = binary.AppendUvarint(b, uint64(m.ID))
	b = appendString(b, m.ClientAddr)
	b = appendString(b, m.PeerAddr)
	head := len(b)
	b = binary.AppendUvarint(b, uint64(len(groups)))
	for _, g := range groups {
		b = binary.AppendUvarint(b, uint64(g.Group))
		b = binary.AppendUvarint(b, g.Epoch)
	}
	if len(b) <= MaxMetaSize {
		return b, false, nil
	}
	b = append(b[:head], 0) // no groups
	b[1] |= flagGroupsTruncated
	if len(b) > MaxMetaSize {
		return nil, false, fmt.Errorf("%w: %d bytes without groups, limit %d", ErrMetaTooLarge, len(b), MaxMetaSize)
	}
	return b, true, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeMeta decodes metadata written by EncodeMeta. It never panics; bytes
// it cannot read give an error wrapping ErrBadMeta. Bytes after the known
// fields are ignored, so that later versions may append fields.
func DecodeMeta(b []byte) (NodeMeta, error) {
	var m NodeMeta
	if len(b) < 2 {
		return m, fmt.Errorf("%w: %d bytes", ErrBadMeta, len(b))
	}
	if b[0] != MetaVersion {
		return m, fmt.Errorf("%w: version %d", ErrBadMeta, b[0])
	}
	m.GroupsTruncated = b[1]&flagGroupsTruncated != 0
	m.Leaving = b[1]&flagLeaving != 0
	r := metaReader{b: b[2:]}
	id := r.uvarint()
	if id == 0 || id > 1<<32-1 {
		r.fail("node id")
	}
	m.ID = uint32(id)
	m.ClientAddr = r.str()
	m.PeerAddr = r.str()
	n := r.uvarint()
	// Every group takes at least two bytes: bound n before allocating.
	if n > uint64(len(r.b))/2 || n > wire.MaxViewGroups {
		r.fail("group count")
	}
	if r.err == nil && n > 0 {
		m.Groups = make([]GroupEpoch, 0, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			g := r.uvarint()
			e := r.uvarint()
			if g >= wire.MaxViewGroups {
				r.fail("group number")
			}
			m.Groups = append(m.Groups, GroupEpoch{Group: int(g), Epoch: e})
		}
	}
	if r.err != nil {
		return NodeMeta{}, r.err
	}
	return m, nil
}

// metaReader reads uvarints and strings, remembering the first error.
type metaReader struct {
	b   []byte
	err error
}

func (r *metaReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", ErrBadMeta, what)
	}
}

func (r *metaReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *metaReader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > MaxAddrLen || n > uint64(len(r.b)) {
		r.fail("string length")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
