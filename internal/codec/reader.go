package codec

import "encoding/binary"

// Reader decodes a record of uvarints, bytes and length-prefixed fields.
// A read past the end, or a bad uvarint, marks it failed and returns a
// zero value (every later read too), so a decoder checks once, at the end:
// Failed, or Done for a record that must be all of its bytes.
type Reader struct {
	b      []byte
	failed bool
}

// NewReader returns a Reader of b; what it returns aliases b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Uvarint reads a uvarint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.failed = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		r.failed = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Bytes reads n bytes; the slice aliases the record.
func (r *Reader) Bytes(n uint64) []byte {
	if uint64(len(r.b)) < n {
		r.failed = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// Len returns the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

// Rest returns the bytes not read yet (aliasing the record).
func (r *Reader) Rest() []byte { return r.b }

// Fail marks the record bad: a decoder's own check (a value out of range)
// failed.
func (r *Reader) Fail() { r.failed = true }

// Failed reports whether a read, or a decoder's check (Fail), failed.
func (r *Reader) Failed() bool { return r.failed }

// Done reports whether every read succeeded and the whole record was
// read.
func (r *Reader) Done() bool { return !r.failed && len(r.b) == 0 }
