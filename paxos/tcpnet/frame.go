package tcpnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/paxlock/paxlock/paxos"
	"io"
)

// tcpMagic opens the handshake frame.
var tcpMagic = []byte("PXLK")

// tcpRefusal opens what a node writes back on a connection it refuses
// after reading its handshake, followed by the reason and a newline.
var tcpRefusal = []byte("PXLK-REFUSED ")

// refusedError is a handshake refused for a reason the dialer is told.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return "refused: " + e.reason }

// peerHello is what a handshake says: the dialer's id, its data
// directory's incarnation and its cluster's name (both optional).
type peerHello struct {
	id          paxos.NodeID
	incarnation uint64
	cluster     string
}

// maxHelloCluster bounds the cluster name in a handshake.
const maxHelloCluster = 64

// appendHandshake appends the handshake frame:
//
//	u32 len | "PXLK" | version | uvarint id [| uvarint incarnation | uvarint len | cluster]
//
// The optional part is written when either is set (a cluster name longer
// than maxHelloCluster is cut).
func appendHandshake(dst []byte, h peerHello) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, tcpMagic...)
	dst = append(dst, tcpHandshakeVersion)
	dst = binary.AppendUvarint(dst, uint64(h.id))
	if h.incarnation != 0 || h.cluster != "" {
		c := h.cluster[:min(len(h.cluster), maxHelloCluster)]
		dst = binary.AppendUvarint(dst, h.incarnation)
		dst = binary.AppendUvarint(dst, uint64(len(c)))
		dst = append(dst, c...)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// maxHandshake bounds the handshake frame after its length.
const maxHandshake = 4 + 1 + 2*binary.MaxVarintLen64 + 1 + maxHelloCluster

// readHello reads the handshake frame (see appendHandshake).
func readHello(br *bufio.Reader) (peerHello, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return peerHello{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < uint32(len(tcpMagic))+2 || n > maxHandshake {
		return peerHello{}, fmt.Errorf("%w: handshake frame of %d bytes", paxos.ErrCorrupt, n)
	}
	var buf [maxHandshake]byte
	b := buf[:n]
	if _, err := io.ReadFull(br, b); err != nil {
		return peerHello{}, err
	}
	if !bytes.Equal(b[:len(tcpMagic)], tcpMagic) {
		return peerHello{}, fmt.Errorf("%w: handshake magic %q", paxos.ErrCorrupt, b[:len(tcpMagic)])
	}
	b = b[len(tcpMagic):]
	if b[0] != tcpHandshakeVersion {
		return peerHello{}, fmt.Errorf("%w: handshake version %d", paxos.ErrCorrupt, b[0])
	}
	b = b[1:]
	id, k := minimalUvarint(b)
	if k <= 0 || id == 0 || id > 1<<32-1 {
		return peerHello{}, fmt.Errorf("%w: handshake node id", paxos.ErrCorrupt)
	}
	h := peerHello{id: paxos.NodeID(id)}
	b = b[k:]
	if len(b) == 0 {
		return h, nil
	}
	inc, k := minimalUvarint(b)
	if k <= 0 {
		return peerHello{}, fmt.Errorf("%w: handshake incarnation", paxos.ErrCorrupt)
	}
	b = b[k:]
	cl, k := minimalUvarint(b)
	if k <= 0 || cl > maxHelloCluster || uint64(len(b)-k) != cl || (inc == 0 && cl == 0) {
		return peerHello{}, fmt.Errorf("%w: handshake cluster", paxos.ErrCorrupt)
	}
	h.incarnation, h.cluster = inc, string(b[k:])
	return h, nil
}

// minimalUvarint is binary.Uvarint that also refuses a value encoded in
// more bytes than it needs (a last byte of 0 after others), so that a
// handshake has exactly one encoding: k <= 0 on any error.
func minimalUvarint(b []byte) (v uint64, k int) {
	v, k = binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, -k
	}
	return v, k
}

// frameReader reads length-prefixed message frames.
type frameReader struct {
	br      *bufio.Reader
	max     int
	scratch []byte // for frames larger than br's buffer
}

// ready reports whether a whole frame is already buffered, so that next
// will not block.
func (r *frameReader) ready() bool {
	if r.br.Buffered() < 4 {
		return false
	}
	hdr, _ := r.br.Peek(4)
	n := int(binary.BigEndian.Uint32(hdr))
	// An invalid length counts as ready: next reports it without reading.
	return n == 0 || n > r.max || r.br.Buffered()-4 >= n
}

// next reads and decodes one frame. A zero or oversized length, or a frame
// that does not decode, is an error wrapping paxos.ErrCorrupt.
func (r *frameReader) next() (paxos.Message, error) {
	hdr, err := r.br.Peek(4)
	if err != nil {
		return paxos.Message{}, err
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n == 0 || n > r.max {
		return paxos.Message{}, fmt.Errorf("%w: frame of %d bytes (limit %d)", paxos.ErrCorrupt, n, r.max)
	}
	if _, err := r.br.Discard(4); err != nil {
		return paxos.Message{}, err
	}
	if n <= r.br.Size() {
		b, err := r.br.Peek(n)
		if err != nil {
			return paxos.Message{}, unexpectedEOF(err)
		}
		m, err := paxos.DecodeMessage(b)
		_, _ = r.br.Discard(n)
		return m, err
	}
	b, err := r.readBody(n)
	if err != nil {
		return paxos.Message{}, unexpectedEOF(err)
	}
	m, err := paxos.DecodeMessage(b)
	if cap(r.scratch) > tcpKeepBuffer {
		r.scratch = nil
	}
	return m, err
}

// readBody reads an n-byte frame body into r.scratch, growing it (doubling
// from br's buffer size, capped at n) only as bytes arrive: a peer that
// declares a large frame and sends little of it costs what it sent, not
// what it declared.
func (r *frameReader) readBody(n int) ([]byte, error) {
	b := r.scratch[:0]
	for len(b) < n {
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(max(2*cap(b), r.br.Size()), n))
			copy(grown, b)
			b = grown
		}
		k, err := io.ReadFull(r.br, b[len(b):min(cap(b), n)])
		b = b[:len(b)+k]
		if err != nil {
			r.scratch = b[:0]
			return nil, err
		}
	}
	r.scratch = b[:0]
	return b, nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
