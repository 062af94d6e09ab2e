package wire

import (
	"bytes"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// TraceContextLen is the encoded size of a TraceContext: a 16-byte trace
// id, an 8-byte span id and one flags byte, W3C Trace Context's
// traceparent in binary.
const TraceContextLen = 25

// TraceFlagSampled is TraceContext.Flags' sampled bit (W3C trace-flags).
const TraceFlagSampled = 0x01

// TraceContext is the W3C trace context (traceparent) of the client span
// that sent a request, so that the node's spans join the client's trace.
// A nil or zero one is "untraced": it is then left out of the frame,
// which stays byte for byte what an untraced client sends, and what a
// node that predates it reads.
type TraceContext struct {
	// TraceID is the trace's id; all zero is invalid (untraced).
	TraceID [16]byte
	// SpanID is the id of the client span the request belongs to.
	SpanID [8]byte
	// Flags are the W3C trace-flags: TraceFlagSampled asks the node to
	// record its spans.
	Flags byte
}

// IsZero reports whether t (which may be nil) carries no trace (the
// field is then omitted).
func (t *TraceContext) IsZero() bool { return t == nil || t.TraceID == [16]byte{} }

// Sampled reports whether the client sampled the trace.
func (t *TraceContext) Sampled() bool { return t != nil && t.Flags&TraceFlagSampled != 0 }

// writeTrace writes t as a bin field of TraceContextLen bytes.
func (w *fieldWriter) trace(t *TraceContext) {
	var b [TraceContextLen]byte
	copy(b[:16], t.TraceID[:])
	copy(b[16:24], t.SpanID[:])
	b[24] = t.Flags
	if w.err == nil {
		w.err = w.e.EncodeBytesLen(len(b))
	}
	if w.err == nil {
		_, w.err = w.e.Writer().Write(b[:])
	}
}

// optionalTrace writes t, or an empty trace context field when t is nil
// or zero (a later trailing field follows it).
func (w *fieldWriter) optionalTrace(t *TraceContext) {
	if !t.IsZero() {
		w.trace(t)
		return
	}
	if w.err == nil {
		w.err = w.e.EncodeBytesLen(0)
	}
}

// trace reads a trace context field: absent, nil or empty is nil (no
// allocation); otherwise it must be exactly TraceContextLen bytes.
func (f *fieldReader) trace() *TraceContext {
	if !f.next() {
		return nil
	}
	if err := checkStrLen(f.d); err != nil {
		f.err = err
		return nil
	}
	n, err := f.d.DecodeBytesLen()
	if err != nil {
		f.err = err
		return nil
	}
	switch n {
	case -1, 0:
		return nil
	case TraceContextLen:
	default:
		f.err = fmt.Errorf("trace context of %d bytes, want %d", n, TraceContextLen)
		return nil
	}
	var b [TraceContextLen]byte
	if err := readFull(f.d, b[:]); err != nil {
		f.err = err
		return nil
	}
	t := new(TraceContext)
	copy(t.TraceID[:], b[:16])
	copy(t.SpanID[:], b[16:24])
	t.Flags = b[24]
	return t
}

// readFull reads len(b) bytes of d's input into b: straight from the
// bytes.Reader a body is decoded from, so that b stays on the caller's
// stack (io.ReadFull and the Decoder's ReadFull take it through an interface,
// which moves it to the heap).
func readFull(d *msgpack.Decoder, b []byte) error {
	br, ok := d.Buffered().(*bytes.Reader)
	if !ok {
		tmp := make([]byte, len(b))
		if err := d.ReadFull(tmp); err != nil {
			return err
		}
		copy(b, tmp)
		return nil
	}
	if n, _ := br.Read(b); n < len(b) {
		return io.ErrUnexpectedEOF
	}
	return nil
}
