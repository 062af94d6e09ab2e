// Package codec holds the byte encodings the lock service's tables share:
// a pair list (a keyspace image, as backups, checkpoints and namespace
// moves carry it) and the reader of uvarint-framed records.
//
// # Files by job
//
//   - codec.go: AppendPair and EachPair, the pair list's encoding.
//   - reader.go: Reader, the bounds-checked decoder of records and
//     commands.
package codec

import (
	"encoding/binary"
	"errors"
)

// ErrMalformed means a pair list is truncated or its lengths are bad.
var ErrMalformed = errors.New("codec: malformed pair list")

// AppendPair appends one pair to a pair list: a uvarint length and the
// key, then a uvarint length and the value.
func AppendPair(dst, k, v []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// EachPair calls f for every pair of the list b, in order; k and v alias
// b. It returns ErrMalformed for a bad list (after calling f for the good
// pairs before the damage), or the first error f returns.
func EachPair(b []byte, f func(k, v []byte) error) error {
	for len(b) > 0 {
		k, rest, ok := field(b)
		if !ok {
			return ErrMalformed
		}
		v, rest, ok := field(rest)
		if !ok {
			return ErrMalformed
		}
		b = rest
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}

// field reads one length-prefixed field off b.
func field(b []byte) (f, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}
