package systable

import "encoding/binary"

// reader decodes a record: a read past the end, or a bad uvarint, sets
// failed and returns zero values, so a decoder checks once at the end.
type reader struct {
	b      []byte
	failed bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.failed = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.failed = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if uint64(len(r.b)) < n {
		r.failed = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
