package paxos

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// codecRandBallot returns a ballot with fields spread over every varint width.
func codecRandBallot(r *rand.Rand) Ballot {
	return Ballot{Round: codecRandU64(r), Node: NodeID(codecRandU64(r))}
}

// codecRandU64 returns 0, a small number, a large one or the maximum.
func codecRandU64(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return uint64(r.IntN(200))
	case 2:
		return r.Uint64() >> r.UintN(64)
	default:
		return math.MaxUint64
	}
}

func codecRandBytes(r *rand.Rand, max int) []byte {
	n := r.IntN(max + 1)
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func codecRandValue(r *rand.Rand) Value {
	v := Value{Origin: codecRandBallot(r), Seq: codecRandU64(r)}
	if n := r.IntN(5); n > 0 {
		v.Cmds = make([][]byte, n)
		for i := range v.Cmds {
			v.Cmds[i] = codecRandBytes(r, 40)
		}
	}
	switch r.IntN(8) {
	case 0:
		v.Change = &MemberChange{Add: NodeID(1 + r.UintN(math.MaxUint32))}
	case 1:
		v.Change = &MemberChange{Remove: NodeID(1 + r.UintN(math.MaxUint32))}
	}
	return v
}

func codecRandEntry(r *rand.Rand) Entry {
	return Entry{Instance: codecRandU64(r), Ballot: codecRandBallot(r), Value: codecRandValue(r)}
}

func codecRandMessage(r *rand.Rand, t MsgType) Message {
	m := Message{
		Type:      t,
		Group:     GroupID(r.Uint32()),
		From:      NodeID(r.Uint32()),
		To:        NodeID(r.Uint32()),
		Ballot:    codecRandBallot(r),
		Hint:      codecRandBallot(r),
		Instance:  codecRandU64(r),
		Committed: codecRandU64(r),
		LogStart:  codecRandU64(r),
		Tick:      codecRandU64(r),
		Reject:    r.IntN(2) == 0,
		Snapshot:  r.IntN(2) == 0,
		Chunk:     codecRandBytes(r, 100),
		LastChunk: r.IntN(2) == 0,
		ChunkAck:  r.IntN(2) == 0,
	}
	if t == MsgSnapshot {
		m.ChunkSeq = codecRandU64(r) // encoded in snapshot messages only
	}
	if t == MsgAccept {
		// An Accept's chunk carries its options (WriteOnly) instead.
		m.Chunk = nil
		m.WriteOnly = r.IntN(2) == 0
	}
	if n := r.IntN(4); n > 0 {
		m.Entries = make([]Entry, n)
		for i := range m.Entries {
			m.Entries[i] = codecRandEntry(r)
		}
	}
	return m
}

// normalize maps empty slices to nil, which is how the decoder returns them.
func codecNormalize(m Message) Message {
	if len(m.Chunk) == 0 {
		m.Chunk = nil
	}
	if len(m.Entries) == 0 {
		m.Entries = nil
	}
	for i := range m.Entries {
		m.Entries[i].Value = codecNormalizeValue(m.Entries[i].Value)
	}
	return m
}

func codecNormalizeValue(v Value) Value {
	if len(v.Cmds) == 0 {
		v.Cmds = nil
	}
	for i, c := range v.Cmds {
		if len(c) == 0 {
			v.Cmds[i] = nil
		}
	}
	return v
}

func TestCodecMessageRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for typ := MsgPrepare; typ <= MsgSnapshot; typ++ {
		for i := 0; i < 200; i++ {
			m := codecRandMessage(r, typ)
			prefix := []byte("prefix")
			enc := AppendMessage(prefix, &m)
			if !bytes.Equal(enc[:len(prefix)], []byte("prefix")) {
				t.Fatalf("%v: AppendMessage clobbered dst", typ)
			}
			got, err := DecodeMessage(enc[len(prefix):])
			if err != nil {
				t.Fatalf("%v: decode: %v", typ, err)
			}
			want := codecNormalize(m)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v: round trip mismatch\n got %+v\nwant %+v", typ, got, want)
			}
		}
	}
}

func TestCodecDecodeDoesNotAlias(t *testing.T) {
	m := Message{Type: MsgLearnReply, Group: 3, From: 1, To: 2, Chunk: []byte("chunk"),
		Entries: []Entry{{Instance: 7, Value: Value{Cmds: [][]byte{[]byte("abc"), []byte("defg")}}}}}
	enc := AppendMessage(nil, &m)
	got, err := DecodeMessage(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		enc[i] = 0xff
	}
	if string(got.Chunk) != "chunk" || string(got.Entries[0].Value.Cmds[0]) != "abc" || string(got.Entries[0].Value.Cmds[1]) != "defg" {
		t.Fatalf("decoded message aliases its input: %+v", got)
	}
	// Appending to a decoded command must not overwrite its neighbour.
	_ = append(got.Entries[0].Value.Cmds[0], 'X')
	if string(got.Entries[0].Value.Cmds[1]) != "defg" {
		t.Fatalf("decoded commands share capacity: %q", got.Entries[0].Value.Cmds[1])
	}
}

func TestCodecEntryAndValueRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		e := codecRandEntry(r)
		got, err := DecodeEntry(AppendEntry(nil, &e))
		if err != nil {
			t.Fatal(err)
		}
		e.Value = codecNormalizeValue(e.Value)
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("entry mismatch\n got %+v\nwant %+v", got, e)
		}
		v := codecRandValue(r)
		gv, err := DecodeValue(AppendValue(nil, &v))
		if err != nil {
			t.Fatal(err)
		}
		if want := codecNormalizeValue(v); !reflect.DeepEqual(gv, want) {
			t.Fatalf("value mismatch\n got %+v\nwant %+v", gv, want)
		}
	}
}

func TestCodecRejectsCorrupt(t *testing.T) {
	m := Message{Type: MsgAccept, Group: 1, From: 1, To: 2,
		Entries: []Entry{{Instance: 1, Value: Value{Cmds: [][]byte{[]byte("x")}}}}}
	good := AppendMessage(nil, &m)
	cases := map[string][]byte{
		"empty":       nil,
		"version":     append([]byte{9}, good[1:]...),
		"type zero":   append([]byte{codecVersion, 0}, good[2:]...),
		"type high":   append([]byte{codecVersion, byte(MsgSnapshot) + 1}, good[2:]...),
		"flags":       append([]byte{codecVersion, byte(MsgAccept), 0x80}, good[3:]...),
		"trailing":    append(append([]byte(nil), good...), 0),
		"overlong":    {codecVersion, byte(MsgAccept), 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"group > u32": {codecVersion, byte(MsgAccept), 0, 0x80, 0x80, 0x80, 0x80, 0x10},
		"huge count":  {codecVersion, byte(MsgAccept), 0, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	}
	for i := 0; i < len(good); i++ {
		cases["truncated"+string(rune('a'+i%26))+string(rune('0'+i/26))] = good[:i]
	}
	for name, b := range cases {
		if _, err := DecodeMessage(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	ge := AppendEntry(nil, &m.Entries[0])
	for i := 0; i < len(ge); i++ {
		if _, err := DecodeEntry(ge[:i]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("entry truncated at %d: err = %v", i, err)
		}
	}
	if _, err := DecodeEntry(append(ge, 1)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("entry with trailing byte: err = %v", err)
	}
}

// checkMessageReencode asserts the fuzz property: a message that decodes
// re-encodes to bytes that decode to the same message, canonically.
func checkMessageReencode(t *testing.T, b []byte) {
	m, err := DecodeMessage(b)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
		return
	}
	enc := AppendMessage(nil, &m)
	m2, err := DecodeMessage(enc)
	if err != nil {
		t.Fatalf("re-encoded message does not decode: %v", err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("re-encode mismatch\n first %+v\nsecond %+v", m, m2)
	}
	if enc2 := AppendMessage(nil, &m2); !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding not canonical")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for typ := MsgPrepare; typ <= MsgSnapshot; typ++ {
		m := codecRandMessage(r, typ)
		f.Add(AppendMessage(nil, &m))
	}
	f.Fuzz(checkMessageReencode)
}

func FuzzDecodeEntry(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 4; i++ {
		e := codecRandEntry(r)
		f.Add(AppendEntry(nil, &e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		enc := AppendEntry(nil, &e)
		e2, err := DecodeEntry(enc)
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-encode mismatch\n first %+v\nsecond %+v", e, e2)
		}
	})
}

// codecBenchAccept is an Accept carrying one instance of 64 commands of 64 bytes.
func codecBenchAccept() Message {
	cmds := make([][]byte, 64)
	for i := range cmds {
		cmds[i] = bytes.Repeat([]byte{byte(i)}, 64)
	}
	return Message{
		Type: MsgAccept, Group: 7, From: 1, To: 2,
		Ballot: Ballot{Round: 12, Node: 1}, Committed: 123456,
		Entries: []Entry{{Instance: 123457, Ballot: Ballot{Round: 12, Node: 1},
			Value: Value{Origin: Ballot{Round: 12, Node: 1}, Seq: 99, Cmds: cmds}}},
	}
}

func BenchmarkCodec(b *testing.B) {
	m := codecBenchAccept()
	buf := AppendMessage(nil, &m)
	b.Run("Encode", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendMessage(buf[:0], &m)
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeMessage(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestCodecSnapshotFields: a snapshot chunk and its acknowledgement carry
// their sequence number, last-chunk mark and ack mark in fields of their
// own, not in Tick, Reject and Snapshot.
func TestCodecSnapshotFields(t *testing.T) {
	for _, m := range []Message{
		{Type: MsgSnapshot, Group: 2, From: 1, To: 3, Instance: 500, ChunkSeq: 300, LastChunk: true, Chunk: []byte("pairs")},
		{Type: MsgSnapshot, Group: 2, From: 3, To: 1, Instance: 500, ChunkSeq: 300, ChunkAck: true},
	} {
		got, err := DecodeMessage(AppendMessage(nil, &m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, m)
		}
		if got.Tick != 0 || got.Reject || got.Snapshot {
			t.Fatalf("snapshot fields leaked into Tick, Reject or Snapshot: %+v", got)
		}
	}
}

// TestCodecMembershipChange checks the version-2 encoding of values that
// carry a membership change: everything without one encodes exactly as
// version 1 did (so what is stored today still decodes, and what is
// written without changes is readable by older nodes), a change round
// trips in entries, values and messages, and a change that both adds and
// removes is corrupt.
func TestCodecMembershipChange(t *testing.T) {
	plain := Entry{Instance: 5, Ballot: Ballot{Round: 2, Node: 1}, Value: Value{Origin: Ballot{Round: 2, Node: 1}, Seq: 3, Cmds: [][]byte{[]byte("x")}}}
	// The version-1 bytes of plain, as written before changes existed.
	v1 := []byte{1, 5, 2, 1, 2, 1, 3, 1, 1, 'x'}
	if got := AppendEntry(nil, &plain); !bytes.Equal(got, v1) {
		t.Fatalf("entry without a change encodes as %v, want version 1 %v", got, v1)
	}
	if e, err := DecodeEntry(v1); err != nil || !reflect.DeepEqual(e, plain) {
		t.Fatalf("version 1 entry decodes as %+v, %v", e, err)
	}

	ch := plain
	ch.Value = Value{Origin: Ballot{Round: 2, Node: 1}, Seq: 4, Change: &MemberChange{Add: 4}}
	b := AppendEntry(nil, &ch)
	if b[0] != codecVersionChange {
		t.Fatalf("entry with a change has version %d", b[0])
	}
	if e, err := DecodeEntry(b); err != nil || !reflect.DeepEqual(e, ch) {
		t.Fatalf("entry with a change decodes as %+v, %v", e, err)
	}
	vb := AppendValue(nil, &ch.Value)
	if v, err := DecodeValue(vb); err != nil || !reflect.DeepEqual(v, ch.Value) {
		t.Fatalf("value with a change decodes as %+v, %v", v, err)
	}

	m := Message{Type: MsgAccept, Group: 1, From: 1, To: 2, Entries: []Entry{plain, ch}}
	mb := AppendMessage(nil, &m)
	if mb[0] != codecVersionChange {
		t.Fatalf("message with a change has version %d", mb[0])
	}
	got, err := DecodeMessage(mb)
	if err != nil || !reflect.DeepEqual(got.Entries, m.Entries) {
		t.Fatalf("message with a change decodes as %+v, %v", got.Entries, err)
	}
	m.Entries = m.Entries[:1]
	if mb := AppendMessage(nil, &m); mb[0] != codecVersion {
		t.Fatalf("message without a change has version %d", mb[0])
	}

	// Adds and removes at once: no encoder writes it.
	bad := append([]byte{codecVersionChange}, v1[1:]...)
	bad = append(bad, 4, 5)
	if _, err := DecodeEntry(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("change adding 4 and removing 5 decodes: %v", err)
	}
	// Version 2 without a change field is truncated.
	if _, err := DecodeEntry(append([]byte{codecVersionChange}, v1[1:]...)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 2 entry without its change field decodes: %v", err)
	}
}

// TestCodecAcceptWriteOnly checks what keeps a write-only Accept readable
// by every replica: a plain Accept encodes as it always did (an empty
// chunk), a write-only one as the same bytes with the one-byte chunk {1},
// which any decoder reads (and one that predates the options ignores),
// and options bits or bytes this version does not know are ignored.
func TestCodecAcceptWriteOnly(t *testing.T) {
	m := Message{Type: MsgAccept, Group: 4, From: 1, To: 3, Ballot: Ballot{Round: 9, Node: 1}, Committed: 41,
		Entries: []Entry{{Instance: 42, Ballot: Ballot{Round: 9, Node: 1}, Value: Value{Origin: Ballot{Round: 9, Node: 1}, Seq: 5, Cmds: [][]byte{[]byte("x")}}}}}
	plain := AppendMessage(nil, &m)
	if plain[len(plain)-1] != 0 {
		t.Fatalf("a plain Accept ends with chunk length %d, want 0", plain[len(plain)-1])
	}
	wo := m
	wo.WriteOnly = true
	enc := AppendMessage(nil, &wo)
	want := append(slices.Clone(plain[:len(plain)-1]), 1, acceptWriteOnly)
	if !bytes.Equal(enc, want) {
		t.Fatalf("write-only Accept encodes as\n%x, want\n%x", enc, want)
	}
	for _, tc := range []struct {
		tail      []byte
		writeOnly bool
	}{
		{[]byte{0}, false},
		{[]byte{1, 1}, true},
		{[]byte{2, 0xfe, 0xff}, false},
		{[]byte{3, 0xff, 0xff, 0xff}, true},
	} {
		b := append(slices.Clone(plain[:len(plain)-1]), tc.tail...)
		got, err := DecodeMessage(b)
		if err != nil {
			t.Fatalf("tail %x: %v", tc.tail, err)
		}
		if got.WriteOnly != tc.writeOnly || got.Chunk != nil {
			t.Fatalf("tail %x: WriteOnly %v chunk %x, want %v and none", tc.tail, got.WriteOnly, got.Chunk, tc.writeOnly)
		}
	}
	got, err := DecodeMessage(enc)
	if err != nil || !got.WriteOnly {
		t.Fatalf("decode write-only Accept: %+v, %v", got, err)
	}
	// A WriteOnly set on another type is not encoded.
	hb := Message{Type: MsgHeartbeat, Group: 1, From: 1, To: 2, WriteOnly: true}
	if got, err := DecodeMessage(AppendMessage(nil, &hb)); err != nil || got.WriteOnly {
		t.Fatalf("heartbeat: %+v, %v", got, err)
	}
}
