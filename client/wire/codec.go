package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Body errors.
var (
	// ErrUnknownType reports a frame type this version does not define. The
	// frame boundary is intact: a server answers StatusBadRequest and goes
	// on; a client ignores the frame.
	ErrUnknownType = errors.New("wire: unknown message type")
	// ErrMalformed reports a body that is not valid for its type: not a
	// msgpack array, a field of the wrong msgpack type or out of its range,
	// truncated, or followed by trailing bytes. The frame boundary is
	// intact.
	ErrMalformed = errors.New("wire: malformed message body")
	// ErrTypeMismatch reports an AppendFrame call whose message does not
	// belong to the given type (or is a nil pointer).
	ErrTypeMismatch = errors.New("wire: message does not match frame type")
)

// Message is a frame body: one of *Hello, *Acquire, *Renew, *Release,
// *State, *Watch, *Unwatch, *CancelWait, *Heartbeat, *GetView,
// *SubscribeView, *List, *MultiAcquire, *Response, *View, *Granted, *Lost and
// *WatchEvent (and the SCRAM messages). Each
// encodes itself as a msgpack array of its fields in declaration order (see
// the package documentation) and decodes tolerantly: missing trailing fields
// are zero, extra trailing fields are skipped. The methods also make the
// types work with msgpack.Marshal and msgpack.Unmarshal.
type Message interface {
	msgpack.CustomEncoder
	msgpack.CustomDecoder
	wireMessage()
}

// NewMessage returns a new zero message of the body type for typ, or nil if
// typ is unknown.
func NewMessage(typ Type) Message {
	switch typ {
	case TypeHello:
		return new(Hello)
	case TypeAcquire:
		return new(Acquire)
	case TypeRenew:
		return new(Renew)
	case TypeRelease:
		return new(Release)
	case TypeState:
		return new(State)
	case TypeWatch:
		return new(Watch)
	case TypeUnwatch:
		return new(Unwatch)
	case TypeCancelWait:
		return new(CancelWait)
	case TypeList:
		return new(List)
	case TypeMultiAcquire:
		return new(MultiAcquire)
	case TypeHeartbeat:
		return new(Heartbeat)
	case TypeGetView:
		return new(GetView)
	case TypeSubscribeView:
		return new(SubscribeView)
	case TypeScramClientFirst:
		return new(ScramClientFirst)
	case TypeScramClientFinal:
		return new(ScramClientFinal)
	case TypeScramServerFirst:
		return new(ScramServerFirst)
	case TypeScramServerFinal:
		return new(ScramServerFinal)
	case TypeResponse:
		return new(Response)
	case TypeView, TypeViewChanged:
		return new(View)
	case TypeGranted:
		return new(Granted)
	case TypeLost:
		return new(Lost)
	case TypeWatchEvent:
		return new(WatchEvent)
	case TypeSubscribeRegistry:
		return new(SubscribeRegistry)
	case TypeRegistryTables, TypeRegistryChanged:
		return new(RegistryTables)
	}
	return nil
}

// matches reports whether m is a non-nil body of type typ.
func matches(typ Type, m Message) bool {
	switch m := m.(type) {
	case *Hello:
		return typ == TypeHello && m != nil
	case *Acquire:
		return typ == TypeAcquire && m != nil
	case *Renew:
		return typ == TypeRenew && m != nil
	case *Release:
		return typ == TypeRelease && m != nil
	case *State:
		return typ == TypeState && m != nil
	case *Watch:
		return typ == TypeWatch && m != nil
	case *Unwatch:
		return typ == TypeUnwatch && m != nil
	case *CancelWait:
		return typ == TypeCancelWait && m != nil
	case *List:
		return typ == TypeList && m != nil
	case *MultiAcquire:
		return typ == TypeMultiAcquire && m != nil
	case *Heartbeat:
		return typ == TypeHeartbeat && m != nil
	case *GetView:
		return typ == TypeGetView && m != nil
	case *SubscribeView:
		return typ == TypeSubscribeView && m != nil
	case *ScramClientFirst:
		return typ == TypeScramClientFirst && m != nil
	case *ScramClientFinal:
		return typ == TypeScramClientFinal && m != nil
	case *ScramServerFirst:
		return typ == TypeScramServerFirst && m != nil
	case *ScramServerFinal:
		return typ == TypeScramServerFinal && m != nil
	case *Response:
		return typ == TypeResponse && m != nil
	case *View:
		return (typ == TypeView || typ == TypeViewChanged) && m != nil
	case *Granted:
		return typ == TypeGranted && m != nil
	case *Lost:
		return typ == TypeLost && m != nil
	case *WatchEvent:
		return typ == TypeWatchEvent && m != nil
	case *SubscribeRegistry:
		return typ == TypeSubscribeRegistry && m != nil
	case *RegistryTables:
		return (typ == TypeRegistryTables || typ == TypeRegistryChanged) && m != nil
	}
	return false
}

// Codec encodes and decodes frames without allocating per message (beyond
// the strings and slices a decoded message holds). It keeps one msgpack
// Encoder writing into the caller's buffer and one Decoder reading from a
// reused bytes.Reader. The zero Codec is ready to use. A Codec is not safe
// for concurrent use: keep one per event loop, connection or goroutine, or
// use the package-level functions, which draw Codecs from a pool.
type Codec struct {
	// MaxFrame bounds the frames AppendFrame builds, header included
	// (DefaultMaxFrame if not positive).
	MaxFrame int

	enc *msgpack.Encoder
	w   sliceWriter
	dec *msgpack.Decoder
	r   bytes.Reader
}

// NewCodec returns a Codec with the default frame limit.
func NewCodec() *Codec {
	c := new(Codec)
	c.init()
	return c
}

func (c *Codec) init() {
	if c.enc != nil {
		return
	}
	c.enc = msgpack.NewEncoder(&c.w)
	c.enc.UseCompactInts(true)
	c.dec = msgpack.NewDecoder(&c.r)
	// The decoder's allocation limits stay on; frames are bounded before
	// they get here.
}

// AppendFrame appends one frame (header and typ's body m) to dst and returns
// the extended slice. It writes straight into dst: no allocation when dst
// has room. m must be the body type for typ, else ErrTypeMismatch; a frame
// longer than MaxFrame gives ErrFrameTooLarge. On error dst is returned
// unchanged (same length).
func (c *Codec) AppendFrame(dst []byte, typ Type, reqID uint64, m Message) ([]byte, error) {
	if !matches(typ, m) {
		return dst, fmt.Errorf("%w: %s with %T", ErrTypeMismatch, typ, m)
	}
	c.init()
	start := len(dst)
	c.w.b = appendHeader(dst, typ, reqID)
	err := m.EncodeMsgpack(c.enc)
	dst, c.w.b = c.w.b, nil
	if err != nil {
		return dst[:start], fmt.Errorf("wire: encode %s: %w", typ, err)
	}
	maxFrame := c.MaxFrame
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return finishFrame(dst, start, maxFrame)
}

// AppendBody appends m's msgpack encoding alone (no frame header) to dst.
func (c *Codec) AppendBody(dst []byte, m Message) ([]byte, error) {
	if m == nil {
		return dst, fmt.Errorf("%w: nil message", ErrTypeMismatch)
	}
	c.init()
	start := len(dst)
	c.w.b = dst
	err := m.EncodeMsgpack(c.enc)
	dst, c.w.b = c.w.b, nil
	if err != nil {
		return dst[:start], fmt.Errorf("wire: encode %T: %w", m, err)
	}
	return dst, nil
}

// Decode decodes a body of type typ into a new message. It returns
// ErrUnknownType for a type this version does not define and an error
// wrapping ErrMalformed for a body that does not decode. The message does
// not alias body.
func (c *Codec) Decode(typ Type, body []byte) (Message, error) {
	m := NewMessage(typ)
	if m == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownType, typ)
	}
	if err := c.DecodeInto(body, m); err != nil {
		return nil, err
	}
	return m, nil
}

// DecodeInto decodes body into m, overwriting every field, so that a server
// can reuse one message value per type. Strings and slices in m are always
// newly allocated, never shared with an earlier decode or with body. The
// whole body must be one msgpack value; trailing bytes are ErrMalformed.
// After an error m's fields are unspecified.
func (c *Codec) DecodeInto(body []byte, m Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrTypeMismatch)
	}
	c.init()
	c.r.Reset(body)
	c.dec.ResetReader(&c.r)
	if err := m.DecodeMsgpack(c.dec); err != nil {
		return err
	}
	if c.r.Len() != 0 {
		return fmt.Errorf("%w: %T: %d trailing bytes", ErrMalformed, m, c.r.Len())
	}
	return nil
}

var codecPool = sync.Pool{New: func() any { return NewCodec() }}

// AppendFrame is Codec.AppendFrame with a pooled Codec and DefaultMaxFrame.
func AppendFrame(dst []byte, typ Type, reqID uint64, m Message) ([]byte, error) {
	c := codecPool.Get().(*Codec)
	dst, err := c.AppendFrame(dst, typ, reqID, m)
	codecPool.Put(c)
	return dst, err
}

// AppendBody is Codec.AppendBody with a pooled Codec.
func AppendBody(dst []byte, m Message) ([]byte, error) {
	c := codecPool.Get().(*Codec)
	dst, err := c.AppendBody(dst, m)
	codecPool.Put(c)
	return dst, err
}

// Decode is Codec.Decode with a pooled Codec.
func Decode(typ Type, body []byte) (Message, error) {
	c := codecPool.Get().(*Codec)
	m, err := c.Decode(typ, body)
	codecPool.Put(c)
	return m, err
}

// DecodeInto is Codec.DecodeInto with a pooled Codec.
func DecodeInto(body []byte, m Message) error {
	c := codecPool.Get().(*Codec)
	err := c.DecodeInto(body, m)
	codecPool.Put(c)
	return err
}

// sliceWriter is the Encoder's sink: it appends to b.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *sliceWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

// fieldWriter writes a message's fields, keeping the first error.
type fieldWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *fieldWriter) array(n int) {
	if w.err == nil {
		w.err = w.e.EncodeArrayLen(n)
	}
}

func (w *fieldWriter) uint(v uint64) {
	if w.err == nil {
		w.err = w.e.EncodeUint(v)
	}
}

// optional counts a trailing field that is written only when it is
// nonzero: 1 if v is, else 0. Decoders read a field missing from the end of
// the array as zero, so an old peer and a new one agree either way.
func optional[T ~uint8 | ~uint32](v T) int {
	if v != 0 {
		return 1
	}
	return 0
}

// optionalUint writes a trailing field that optional counted.
func (w *fieldWriter) optionalUint(v uint64) {
	if v != 0 {
		w.uint(v)
	}
}

func (w *fieldWriter) str(v string) {
	if w.err == nil {
		w.err = w.e.EncodeString(v)
	}
}

// bin writes an opaque byte string as msgpack bin.
func (w *fieldWriter) bin(v string) {
	if w.err == nil {
		w.err = w.e.EncodeBytesLen(len(v))
	}
	if w.err == nil {
		_, w.err = io.WriteString(w.e.Writer(), v)
	}
}

func (w *fieldWriter) boolean(v bool) {
	if w.err == nil {
		w.err = w.e.EncodeBool(v)
	}
}

// fieldReader reads the fields of one array-encoded message. Reading past
// the array's end yields zero values; done skips fields beyond the ones
// read.
type fieldReader struct {
	d   *msgpack.Decoder
	n   int // fields not yet read
	err error
}

func readFields(d *msgpack.Decoder) fieldReader {
	n, err := d.DecodeArrayLen()
	if err == nil && n < 0 {
		err = errors.New("nil instead of array")
	}
	return fieldReader{d: d, n: n, err: err}
}

// next reports whether there is another field to read.
func (f *fieldReader) next() bool {
	if f.err != nil || f.n <= 0 {
		return false
	}
	f.n--
	return true
}

func (f *fieldReader) uintMax(max uint64) uint64 {
	if !f.next() {
		return 0
	}
	v, err := f.d.DecodeUint64()
	if err != nil {
		f.err = err
		return 0
	}
	if v > max {
		f.err = fmt.Errorf("integer %d out of range (max %d)", v, max)
		return 0
	}
	return v
}

func (f *fieldReader) u64() uint64 { return f.uintMax(math.MaxUint64) }
func (f *fieldReader) u32() uint32 { return uint32(f.uintMax(math.MaxUint32)) }
func (f *fieldReader) u8() uint8   { return uint8(f.uintMax(math.MaxUint8)) }

func (f *fieldReader) str() string {
	if !f.next() {
		return ""
	}
	if err := checkStrLen(f.d); err != nil {
		f.err = err
		return ""
	}
	s, err := f.d.DecodeString()
	if err != nil {
		f.err = err
		return ""
	}
	return s
}

// bin reads a byte-string field (msgpack bin or str; nil reads as
// empty) and reports whether the field was present at all.
func (f *fieldReader) bin() (string, bool) {
	if !f.next() {
		return "", false
	}
	if err := checkStrLen(f.d); err != nil {
		f.err = err
		return "", false
	}
	c, err := f.d.PeekCode()
	if err != nil {
		f.err = err
		return "", false
	}
	if msgpcode.IsString(c) || c == msgpcode.Nil {
		s, err := f.d.DecodeString()
		if err != nil {
			f.err = err
			return "", false
		}
		return s, true
	}
	v, err := f.d.DecodeBytes()
	if err != nil {
		f.err = err
		return "", false
	}
	return string(v), true
}

// elemStr reads a string element of a list (see list).
func (f *fieldReader) elemStr() string {
	if f.err != nil {
		return ""
	}
	f.n++
	return f.str()
}

// elemU64 reads an unsigned element of a list (see list).
func (f *fieldReader) elemU64() uint64 {
	if f.err != nil {
		return 0
	}
	f.n++
	return f.u64()
}

func (f *fieldReader) boolean() bool {
	if !f.next() {
		return false
	}
	v, err := f.d.DecodeBool()
	if err != nil {
		f.err = err
	}
	return v
}

// list reads an array field's length, which must be at most max, for the
// caller to read that many elements; a missing field or msgpack nil is 0.
func (f *fieldReader) list(max int) int {
	if !f.next() {
		return 0
	}
	n, err := f.d.DecodeArrayLen()
	if err != nil {
		f.err = err
		return 0
	}
	if n > max {
		f.err = fmt.Errorf("list of %d, limit %d", n, max)
		return 0
	}
	if br, ok := f.d.Buffered().(*bytes.Reader); ok && n > br.Len() {
		// Every element takes at least one byte.
		f.err = io.ErrUnexpectedEOF
		return 0
	}
	if n < 0 {
		return 0
	}
	return n
}

// checkStrLen fails if the string or binary value at the reader's position
// declares more bytes than remain. The msgpack decoder would otherwise
// allocate up to a megabyte at a time towards the declared length before it
// noticed the end of input, so that a few bytes could cost megabytes. It
// checks only when the decoder reads from a bytes.Reader, as every Codec's
// does; anything else it leaves to the decoder.
func checkStrLen(d *msgpack.Decoder) error {
	br, ok := d.Buffered().(*bytes.Reader)
	if !ok {
		return nil
	}
	var hdr [5]byte
	k, _ := br.ReadAt(hdr[:], br.Size()-int64(br.Len()))
	if k == 0 {
		return nil // the decoder reports the end of input
	}
	c := hdr[0]
	var size, n int // header size, declared length
	switch {
	case msgpcode.IsFixedString(c):
		size, n = 1, int(c&msgpcode.FixedStrMask)
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		size = 2
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		size = 3
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		size = 5
	default:
		return nil // nil, or a type error the decoder reports
	}
	if k < size {
		return io.ErrUnexpectedEOF
	}
	for _, b := range hdr[1:size] {
		n = n<<8 | int(b)
	}
	if n > br.Len()-size {
		return fmt.Errorf("string of %d bytes, %d left: %w", n, br.Len()-size, io.ErrUnexpectedEOF)
	}
	return nil
}

// done skips unread trailing fields and returns the first error, wrapped in
// ErrMalformed and naming the message.
func (f *fieldReader) done(what string) error {
	if f.err == nil && f.n > 0 {
		f.err = skipValues(f.d, f.n)
		f.n = 0
	}
	if f.err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, what, f.err)
	}
	return nil
}

// skipValues skips n msgpack values of any type. It never recurses: nested
// arrays and maps add their elements to a counter, so a deeply nested body
// costs time proportional to its size and no stack.
func skipValues(d *msgpack.Decoder, n int) error {
	br, _ := d.Buffered().(*bytes.Reader)
	pending := n
	for pending > 0 {
		if br != nil && pending > br.Len() {
			// Every value takes at least one byte.
			return io.ErrUnexpectedEOF
		}
		pending--
		c, err := d.PeekCode()
		if err != nil {
			return err
		}
		switch {
		case msgpcode.IsFixedNum(c), c >= msgpcode.Uint8 && c <= msgpcode.Int64:
			_, err = d.DecodeInt64()
		case c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True:
			_, err = d.DecodeBool()
		case c == msgpcode.Float, c == msgpcode.Double:
			_, err = d.DecodeFloat64()
		case msgpcode.IsString(c), msgpcode.IsBin(c):
			var l int
			if l, err = d.DecodeBytesLen(); err == nil {
				err = discard(d, br, l)
			}
		case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
			var l int
			if l, err = d.DecodeArrayLen(); err == nil && l > 0 {
				pending += l
			}
		case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
			var l int
			if l, err = d.DecodeMapLen(); err == nil && l > 0 {
				pending += 2 * l
			}
		case msgpcode.IsExt(c):
			var l int
			if _, l, err = d.DecodeExtHeader(); err == nil {
				err = discard(d, br, l)
			}
		default:
			err = fmt.Errorf("invalid msgpack code %#x", c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// discard skips n raw bytes.
func discard(d *msgpack.Decoder, br *bytes.Reader, n int) error {
	if n <= 0 {
		return nil
	}
	if br != nil {
		if n > br.Len() {
			return io.ErrUnexpectedEOF
		}
		_, err := br.Seek(int64(n), io.SeekCurrent)
		return err
	}
	buf := make([]byte, min(n, 4096))
	for n > 0 {
		k := min(n, len(buf))
		if err := d.ReadFull(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
