package paxos

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Binary encoding of messages and entries.
//
// A message is encoded as
//
//	u8 version | u8 type | u8 flags | uvarint group | uvarint from | uvarint to |
//	ballot | hint | uvarint instance | uvarint committed | uvarint logStart |
//	uvarint tick | [uvarint chunkSeq] | uvarint len(entries) | entry... |
//	uvarint len(chunk) | chunk
//
// where chunkSeq is present only in a MsgSnapshot, a ballot is uvarint
// round | uvarint node, the flags bits are Reject, Snapshot, LastChunk and
// ChunkAck from bit 0 up, and an entry is
//
//	uvarint instance | ballot | value
//	value = ballot origin | uvarint seq | uvarint len(cmds) | (uvarint len(cmd) | cmd)... [| change]
//	change = uvarint add | uvarint remove
//
// In a MsgAccept the chunk carries the Accept's options instead of snapshot
// bytes: empty, or one byte whose bit 0 is WriteOnly. Every decoder reads
// an Accept's chunk and ignores it, those that predate the options
// included, so a replica that does not know WriteOnly votes on a
// write-only Accept (safe: an extra synced vote), and decoders of this
// version ignore the options' other bits and bytes for the same reason:
// options added later are hints an older replica may pass over.
//
// A stand-alone entry (AppendEntry, as stored in the log) and a stand-alone
// value (AppendValue) are prefixed with the same version byte.
//
// Version 1 has no change field. Version 2 adds it to every value of the
// encoding; an encoder writes version 2 only when some value carries a
// membership change (Value.Change), so everything else is encoded, and
// every byte stored before membership changes existed still decodes,
// exactly as version 1.
//
// Decoding is strict: every count and length is checked against the bytes
// that remain before anything is allocated, trailing bytes are an error, and
// so is any field value an encoder would not produce (unknown version, type
// or flag bits, a node or group id above 32 bits). Decoded commands and
// chunks never alias the input: they are copied into one allocation per
// call.

const (
	// codecVersion is the first byte of every encoded message, entry and
	// value.
	codecVersion = 1
	// codecVersionChange is the version of an encoding in which every
	// value carries the change field (see above).
	codecVersionChange = 2

	flagReject    = 1 << 0
	flagSnapshot  = 1 << 1
	flagLastChunk = 1 << 2
	flagChunkAck  = 1 << 3
	flagsKnown    = flagReject | flagSnapshot | flagLastChunk | flagChunkAck

	// minEntryLen is the fewest bytes an encoded entry body can take:
	// instance, ballot (2), origin (2), seq and the command count.
	minEntryLen = 7

	// acceptWriteOnly is the bit of an Accept's options byte (its chunk)
	// that says WriteOnly.
	acceptWriteOnly = 1 << 0
)

// acceptOptsWriteOnly is the chunk of a write-only Accept.
var acceptOptsWriteOnly = []byte{acceptWriteOnly}

// AppendMessage appends the binary encoding of m to dst and returns the
// extended slice. It does not allocate when dst has enough capacity.
func AppendMessage(dst []byte, m *Message) []byte {
	var flags byte
	if m.Reject {
		flags |= flagReject
	}
	if m.Snapshot {
		flags |= flagSnapshot
	}
	if m.LastChunk {
		flags |= flagLastChunk
	}
	if m.ChunkAck {
		flags |= flagChunkAck
	}
	ver := byte(codecVersion)
	for i := range m.Entries {
		if m.Entries[i].Value.Change != nil {
			ver = codecVersionChange
			break
		}
	}
	dst = append(dst, ver, byte(m.Type), flags)
	dst = binary.AppendUvarint(dst, uint64(m.Group))
	dst = binary.AppendUvarint(dst, uint64(m.From))
	dst = binary.AppendUvarint(dst, uint64(m.To))
	dst = appendBallot(dst, m.Ballot)
	dst = appendBallot(dst, m.Hint)
	dst = binary.AppendUvarint(dst, m.Instance)
	dst = binary.AppendUvarint(dst, m.Committed)
	dst = binary.AppendUvarint(dst, m.LogStart)
	dst = binary.AppendUvarint(dst, m.Tick)
	if m.Type == MsgSnapshot {
		dst = binary.AppendUvarint(dst, m.ChunkSeq)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
	for i := range m.Entries {
		dst = appendEntryBody(dst, &m.Entries[i], ver)
	}
	chunk := m.Chunk
	if m.Type == MsgAccept {
		chunk = nil
		if m.WriteOnly {
			chunk = acceptOptsWriteOnly
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(chunk)))
	return append(dst, chunk...)
}

// AppendEntry appends the binary encoding of e (a version byte and the entry)
// to dst and returns the extended slice. The log stores entries in this form.
func AppendEntry(dst []byte, e *Entry) []byte {
	ver := valueVersion(&e.Value)
	dst = append(dst, ver)
	return appendEntryBody(dst, e, ver)
}

// AppendValue appends the binary encoding of v (a version byte and the value)
// to dst and returns the extended slice.
func AppendValue(dst []byte, v *Value) []byte {
	ver := valueVersion(v)
	dst = append(dst, ver)
	return appendValueBody(dst, v, ver)
}

// valueVersion is the version a stand-alone encoding of v uses.
func valueVersion(v *Value) byte {
	if v.Change != nil {
		return codecVersionChange
	}
	return codecVersion
}

func appendBallot(dst []byte, b Ballot) []byte {
	dst = binary.AppendUvarint(dst, b.Round)
	return binary.AppendUvarint(dst, uint64(b.Node))
}

func appendEntryBody(dst []byte, e *Entry, ver byte) []byte {
	dst = binary.AppendUvarint(dst, e.Instance)
	dst = appendBallot(dst, e.Ballot)
	return appendValueBody(dst, &e.Value, ver)
}

func appendValueBody(dst []byte, v *Value, ver byte) []byte {
	dst = appendBallot(dst, v.Origin)
	dst = binary.AppendUvarint(dst, v.Seq)
	dst = binary.AppendUvarint(dst, uint64(len(v.Cmds)))
	for _, c := range v.Cmds {
		dst = binary.AppendUvarint(dst, uint64(len(c)))
		dst = append(dst, c...)
	}
	if ver == codecVersionChange {
		var ch MemberChange
		if v.Change != nil {
			ch = *v.Change
		}
		dst = binary.AppendUvarint(dst, uint64(ch.Add))
		dst = binary.AppendUvarint(dst, uint64(ch.Remove))
	}
	return dst
}

// DecodeMessage decodes a message encoded by AppendMessage. The result does
// not alias b. Malformed input yields an error wrapping ErrCorrupt; it never
// panics, and it allocates at most a small multiple of len(b) (the worst
// case, a message of empty commands, costs a 24-byte slice header per input
// byte).
func DecodeMessage(b []byte) (Message, error) {
	// Pass 1 validates the whole input and counts; pass 2 fills exactly
	// sized allocations, so that a message costs at most three of them (the
	// entries, the command headers and one buffer for every payload byte).
	d := wireDecoder{b: b}
	var m Message
	d.message(&m)
	if d.err != nil {
		return Message{}, d.err
	}
	d.fillPass()
	d.message(&m)
	if d.err != nil { // cannot happen: pass 1 accepted the same bytes
		return Message{}, d.err
	}
	return m, nil
}

// DecodeEntry decodes an entry encoded by AppendEntry. The result does not
// alias b. Malformed input yields an error wrapping ErrCorrupt.
func DecodeEntry(b []byte) (Entry, error) {
	d := wireDecoder{b: b}
	var e Entry
	for pass := 0; pass < 2; pass++ {
		d.version()
		d.entry(&e)
		d.end()
		if d.err != nil {
			return Entry{}, d.err
		}
		d.fillPass()
	}
	return e, nil
}

// DecodeValue decodes a value encoded by AppendValue. The result does not
// alias b. Malformed input yields an error wrapping ErrCorrupt.
func DecodeValue(b []byte) (Value, error) {
	d := wireDecoder{b: b}
	var v Value
	for pass := 0; pass < 2; pass++ {
		d.version()
		d.value(&v)
		d.end()
		if d.err != nil {
			return Value{}, d.err
		}
		d.fillPass()
	}
	return v, nil
}

// wireDecoder reads one encoding in two passes. In the counting pass (fill ==
// false) it only validates and counts what it would allocate; in the fill
// pass it carves the results out of allocations made to those counts.
type wireDecoder struct {
	b    []byte
	off  int
	err  error
	fill bool
	ver  byte // the encoding's version, once read

	// Counted in pass 1.
	nEntries, nCmds, nBytes int

	// Allocated for pass 2.
	entries []Entry
	cmds    [][]byte
	bytes   []byte
}

// fillPass rewinds d and allocates for the fill pass.
func (d *wireDecoder) fillPass() {
	d.off = 0
	d.fill = true
	if d.nEntries > 0 {
		d.entries = make([]Entry, 0, d.nEntries)
	}
	if d.nCmds > 0 {
		d.cmds = make([][]byte, 0, d.nCmds)
	}
	if d.nBytes > 0 {
		d.bytes = make([]byte, 0, d.nBytes)
	}
}

func (d *wireDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at offset %d", ErrCorrupt, fmt.Sprintf(format, args...), d.off)
	}
}

func (d *wireDecoder) remaining() int { return len(d.b) - d.off }

func (d *wireDecoder) byte1(what string) byte {
	if d.off >= len(d.b) {
		d.fail("truncated %s", what)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// uvarint reads an unsigned varint; one-byte values take the inlined path.
// After an error it keeps returning values, but every length it feeds is
// checked again by count, which returns 0 once d.err is set.
func (d *wireDecoder) uvarint(what string) uint64 {
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		v := d.b[d.off]
		d.off++
		return uint64(v)
	}
	return d.uvarintSlow(what)
}

func (d *wireDecoder) uvarintSlow(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		if n == 0 {
			d.fail("truncated %s", what)
		} else {
			d.fail("overlong varint in %s", what)
		}
		return 0
	}
	d.off += n
	return v
}

func (d *wireDecoder) uint32v(what string) uint32 {
	v := d.uvarint(what)
	if v > math.MaxUint32 {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

// count reads a count of items that take at least minLen bytes each and
// checks it against the remaining input.
func (d *wireDecoder) count(what string, minLen int) int {
	v := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if v > uint64(d.remaining()/minLen) {
		d.fail("%s %d exceeds remaining %d bytes", what, v, d.remaining())
		return 0
	}
	return int(v)
}

// bytesField reads a length-prefixed byte string and returns a copy carved
// from d.bytes (nil in the counting pass, or when empty).
func (d *wireDecoder) bytesField(what string) []byte {
	src := d.rawField(what)
	if d.err != nil {
		return nil
	}
	n := len(src)
	if !d.fill {
		d.nBytes += n
		return nil
	}
	if n == 0 {
		return nil
	}
	start := len(d.bytes)
	d.bytes = append(d.bytes, src...)
	return d.bytes[start:len(d.bytes):len(d.bytes)]
}

// rawField reads a length-prefixed byte string and returns it in place:
// a view of the input, to be read at once and not kept.
func (d *wireDecoder) rawField(what string) []byte {
	n := d.count(what, 1)
	if d.err != nil {
		return nil
	}
	src := d.b[d.off : d.off+n]
	d.off += n
	return src
}

func (d *wireDecoder) ballot(what string) Ballot {
	r := d.uvarint(what)
	n := d.uint32v(what)
	return Ballot{Round: r, Node: NodeID(n)}
}

func (d *wireDecoder) version() {
	v := d.byte1("version")
	if d.err == nil && v != codecVersion && v != codecVersionChange {
		d.fail("unknown version %d", v)
	}
	d.ver = v
}

func (d *wireDecoder) end() {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
}

func (d *wireDecoder) message(m *Message) {
	d.version()
	t := MsgType(d.byte1("type"))
	if d.err == nil && (t < MsgPrepare || t > MsgSnapshot) {
		d.fail("unknown message type %d", uint8(t))
	}
	flags := d.byte1("flags")
	if d.err == nil && flags&^flagsKnown != 0 {
		d.fail("unknown flags %#x", flags)
	}
	m.Type = t
	m.Reject = flags&flagReject != 0
	m.Snapshot = flags&flagSnapshot != 0
	m.LastChunk = flags&flagLastChunk != 0
	m.ChunkAck = flags&flagChunkAck != 0
	m.Group = GroupID(d.uint32v("group"))
	m.From = NodeID(d.uint32v("from"))
	m.To = NodeID(d.uint32v("to"))
	m.Ballot = d.ballot("ballot")
	m.Hint = d.ballot("hint")
	m.Instance = d.uvarint("instance")
	m.Committed = d.uvarint("committed")
	m.LogStart = d.uvarint("logStart")
	m.Tick = d.uvarint("tick")
	m.ChunkSeq = 0
	if t == MsgSnapshot {
		m.ChunkSeq = d.uvarint("chunk seq")
	}
	n := d.count("entry count", minEntryLen)
	if d.err != nil {
		return
	}
	m.Entries = nil
	switch {
	case !d.fill:
		d.nEntries += n
		var e Entry
		for i := 0; i < n && d.err == nil; i++ {
			d.entry(&e)
		}
	case n > 0:
		start := len(d.entries)
		d.entries = d.entries[:start+n]
		m.Entries = d.entries[start : start+n : start+n]
		for i := range m.Entries {
			d.entry(&m.Entries[i])
		}
	}
	m.WriteOnly = false
	if t == MsgAccept {
		opts := d.rawField("accept options length")
		m.WriteOnly = len(opts) > 0 && opts[0]&acceptWriteOnly != 0
		m.Chunk = nil
	} else {
		m.Chunk = d.bytesField("chunk length")
	}
	d.end()
}

func (d *wireDecoder) entry(e *Entry) {
	e.Instance = d.uvarint("entry instance")
	e.Ballot = d.ballot("entry ballot")
	d.value(&e.Value)
}

func (d *wireDecoder) value(v *Value) {
	d.valueCmds(v)
	v.Change = nil
	if d.ver != codecVersionChange || d.err != nil {
		return
	}
	add := d.uint32v("change add")
	rm := d.uint32v("change remove")
	if d.err != nil || add == 0 && rm == 0 {
		return // a value without a change in a version-2 encoding
	}
	if add != 0 && rm != 0 {
		d.fail("change adds %d and removes %d", add, rm)
		return
	}
	if d.fill {
		v.Change = &MemberChange{Add: NodeID(add), Remove: NodeID(rm)}
	}
}

func (d *wireDecoder) valueCmds(v *Value) {
	v.Origin = d.ballot("value origin")
	v.Seq = d.uvarint("value seq")
	n := d.count("command count", 1)
	v.Cmds = nil
	if d.err != nil {
		return
	}
	if !d.fill {
		d.nCmds += n
		for i := 0; i < n; i++ {
			l := d.length()
			if d.err != nil {
				return
			}
			d.off += l
			d.nBytes += l
		}
		return
	}
	if n == 0 {
		return
	}
	start := len(d.cmds)
	d.cmds = d.cmds[:start+n]
	v.Cmds = d.cmds[start : start+n : start+n]
	for i := range v.Cmds {
		l := d.length()
		if l == 0 {
			continue // nil, as the counting pass assumed (or an error)
		}
		src := d.b[d.off : d.off+l]
		d.off += l
		bs := len(d.bytes)
		d.bytes = append(d.bytes, src...)
		v.Cmds[i] = d.bytes[bs : bs+l : bs+l]
	}
}

// length reads the length of a command and checks it against the remaining
// input; lengths below 128 take the inlined path.
func (d *wireDecoder) length() int {
	if d.off < len(d.b) {
		if c := d.b[d.off]; c < 0x80 && int(c) < len(d.b)-d.off {
			d.off++
			return int(c)
		}
	}
	return d.count("command length", 1)
}
