package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Frame layout constants.
const (
	// Version is the protocol version carried in every frame's fifth byte.
	// A receiver refuses any other value with ErrBadVersion.
	Version = 1
	// HeaderSize is the size of a frame's fixed part: u32 length, u8
	// version, u8 type, u64 request id.
	HeaderSize = 4 + 1 + 1 + 8
	// DefaultMaxFrame is the largest frame, header included, that a
	// receiver accepts unless configured otherwise.
	DefaultMaxFrame = 1 << 20
)

// Framing errors. A receiver that gets one of these from ParseFrame or
// ReadFrame has lost the frame boundary and must close the connection.
var (
	// ErrFrameTooLarge reports a frame longer than the receiver's maximum
	// (or, from AppendFrame, than the sender's).
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrBadVersion reports a frame whose version byte is not Version.
	ErrBadVersion = errors.New("wire: unsupported protocol version")
	// ErrBadLength reports a length prefix too small to hold the header.
	ErrBadLength = errors.New("wire: frame length shorter than header")
)

// Frame is one decoded frame header plus its undecoded body.
type Frame struct {
	// Type is the message type. ParseFrame and ReadFrame return frames of
	// unknown types too; Decode refuses them with ErrUnknownType.
	Type Type
	// ReqID is the request id: chosen by the client for a request (nonzero,
	// unique among its connection's requests in flight), echoed in the
	// reply, and 0 in a push.
	ReqID uint64
	// Body is the msgpack-encoded message. It aliases the buffer the frame
	// was parsed from (its capacity is capped at its length, so appending
	// to it never overwrites the next frame): decode or copy it before that
	// buffer is reused or discarded.
	Body []byte
}

// IsPush reports whether the frame is a server push (request id 0).
func (f Frame) IsPush() bool { return f.ReqID == 0 }

// ParseFrame parses the first frame in b, which may hold less than one
// frame, exactly one, or several. It returns the frame and n, the number of
// bytes it occupies in b; the caller consumes n bytes and calls again. When
// b holds only part of a frame, it returns n == 0 and a nil error: read more
// and retry with the same bytes at the front.
//
// maxFrame bounds the whole frame, header included (DefaultMaxFrame if it is
// not positive). ParseFrame reports a broken stream as soon as the header
// shows it, before the rest arrives: ErrFrameTooLarge, ErrBadLength or
// ErrBadVersion. The frame's type is not checked.
//
// With gnet: b is c.Peek(-1); decode the frame's body, then c.Discard(n).
func ParseFrame(b []byte, maxFrame int) (f Frame, n int, err error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	if len(b) < 4 {
		return Frame{}, 0, nil
	}
	total, err := frameLen(b, maxFrame)
	if err != nil {
		return Frame{}, 0, err
	}
	if len(b) > 4 && b[4] != Version {
		return Frame{}, 0, fmt.Errorf("%w: %d", ErrBadVersion, b[4])
	}
	if len(b) < total {
		return Frame{}, 0, nil
	}
	return Frame{
		Type:  Type(b[5]),
		ReqID: binary.BigEndian.Uint64(b[6:HeaderSize]),
		Body:  b[HeaderSize:total:total],
	}, total, nil
}

// frameLen reads the length prefix at the front of b (len(b) >= 4) and
// returns the whole frame's size.
func frameLen(b []byte, maxFrame int) (int, error) {
	l := uint64(binary.BigEndian.Uint32(b))
	if l+4 > uint64(maxFrame) {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, l+4, maxFrame)
	}
	if l < HeaderSize-4 {
		return 0, fmt.Errorf("%w: length %d", ErrBadLength, l)
	}
	return int(l) + 4, nil
}

// ReadFrame reads exactly one frame from r, for callers that read a stream
// (a net.Conn behind a bufio.Reader) rather than parse a buffer. It reads
// into buf, growing it if needed, and returns the frame and the buffer to
// pass to the next call; the frame's Body aliases that buffer. maxFrame is as
// for ParseFrame. At a clean end of stream, before any byte of a frame, it
// returns io.EOF; in the middle of a frame, io.ErrUnexpectedEOF.
//
// The buffer grows with the bytes that arrive, never to the length the
// header declares before they do: a peer that sends a header declaring a
// large frame and then nothing costs the receiver what it sent (rounded up
// to a doubling), not the declared length.
func ReadFrame(r io.Reader, buf []byte, maxFrame int) (Frame, []byte, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	if cap(buf) < HeaderSize {
		buf = make([]byte, 0, 512)
	}
	buf = buf[:HeaderSize]
	if _, err := io.ReadFull(r, buf[:4]); err != nil {
		return Frame{}, buf[:0], err
	}
	total, err := frameLen(buf, maxFrame)
	if err != nil {
		return Frame{}, buf[:0], err
	}
	if _, err := io.ReadFull(r, buf[4:HeaderSize]); err != nil {
		return Frame{}, buf[:0], unexpected(err)
	}
	if buf[4] != Version {
		return Frame{}, buf[:0], fmt.Errorf("%w: %d", ErrBadVersion, buf[4])
	}
	buf, err = readGrowing(r, buf, total)
	if err != nil {
		return Frame{}, buf[:0], unexpected(err)
	}
	f, _, err := ParseFrame(buf, maxFrame)
	return f, buf, err
}

// readChunk is the least a frame buffer grows by while a frame's body is
// read (readGrowing).
const readChunk = 4 << 10

// readGrowing reads into buf (which holds a frame's first len(buf) bytes)
// until it holds total bytes. Beyond buf's capacity it grows in doublings
// of what arrived, starting at readChunk, capped at total: the memory held
// follows the bytes received, never the length a header merely declares.
func readGrowing(r io.Reader, buf []byte, total int) ([]byte, error) {
	for len(buf) < total {
		if len(buf) == cap(buf) {
			nc := min(max(2*cap(buf), readChunk), total)
			nb := make([]byte, len(buf), nc)
			copy(nb, buf)
			buf = nb
		}
		end := min(cap(buf), total)
		n, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendHeader appends a frame header with a zero length, to be patched by
// finishFrame once the body is written.
func appendHeader(dst []byte, typ Type, reqID uint64) []byte {
	dst = append(dst, 0, 0, 0, 0, Version, byte(typ))
	return binary.BigEndian.AppendUint64(dst, reqID)
}

// finishFrame patches the length of the frame that starts at dst[start:].
func finishFrame(dst []byte, start, maxFrame int) ([]byte, error) {
	n := len(dst) - start
	if n > maxFrame || uint64(n-4) > math.MaxUint32 {
		return dst[:start], fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n-4))
	return dst, nil
}
