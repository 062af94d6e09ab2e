package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func mustFrame(t testing.TB, typ Type, reqID uint64, m Message) []byte {
	t.Helper()
	b, err := AppendFrame(nil, typ, reqID, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFrameHeaderLayout(t *testing.T) {
	b := mustFrame(t, TypeState, 0x0102030405060708, &State{Key: "k"})
	want := []byte{0, 0, 0, 13, Version, byte(TypeState), 1, 2, 3, 4, 5, 6, 7, 8, 0x91, 0xa1, 'k'}
	if !bytes.Equal(b, want) {
		t.Fatalf("got % x\nwant % x", b, want)
	}
}

func TestParseFrameEverySplit(t *testing.T) {
	frame := mustFrame(t, TypeAcquire, 99, &Acquire{Key: "order:42", Owner: Owner{1, 2}, Weight: 1, TTLMs: 30000})
	for i := 0; i < len(frame); i++ {
		f, n, err := ParseFrame(frame[:i], 0)
		if err != nil || n != 0 || f.Body != nil {
			t.Fatalf("prefix %d: %v %d %v", i, f, n, err)
		}
	}
	f, n, err := ParseFrame(frame, 0)
	if err != nil || n != len(frame) || f.Type != TypeAcquire || f.ReqID != 99 {
		t.Fatalf("%v %d %v", f, n, err)
	}
	if cap(f.Body) != len(f.Body) {
		t.Fatal("body capacity not capped")
	}
}

// TestParseFrameStream feeds several frames through a buffer in chunks of
// every size, the way a server loop sees them.
func TestParseFrameStream(t *testing.T) {
	var stream []byte
	var want []Message
	var types []Type
	for i, m := range []struct {
		t Type
		m Message
	}{
		{TypeHello, &Hello{Namespace: "ns", Secret: "s", ClientID: 5, ClientKey: "k"}},
		{TypeAcquire, &Acquire{Key: "a", Owner: Owner{5, 1}, Weight: 1}},
		{TypeResponse, &Response{Status: StatusSuccess, Token: 1 << 50}},
		{TypeHeartbeat, &Heartbeat{}},
		{TypeView, &View{Version: 2, Groups: []GroupView{{1, "x:1", 3}}}},
		{TypeRelease, &Release{Key: strings.Repeat("k", 400), Owner: Owner{5, 1}, Token: 9}},
	} {
		var err error
		stream, err = AppendFrame(stream, m.t, uint64(i+1), m.m)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m.m)
		types = append(types, m.t)
	}
	for chunk := 1; chunk <= len(stream); chunk++ {
		var buf []byte
		var got []Message
		for off := 0; off < len(stream); off += chunk {
			buf = append(buf, stream[off:min(off+chunk, len(stream))]...)
			for {
				f, n, err := ParseFrame(buf, 0)
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				if n == 0 {
					break
				}
				if f.ReqID != uint64(len(got)+1) || f.Type != types[len(got)] {
					t.Fatalf("chunk %d: frame %d header %v", chunk, len(got), f)
				}
				m, err := Decode(f.Type, f.Body)
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				got = append(got, m)
				buf = buf[n:]
			}
		}
		if len(buf) != 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("chunk %d: got %d messages, %d bytes left", chunk, len(got), len(buf))
		}
	}
}

func TestParseFrameErrors(t *testing.T) {
	good := mustFrame(t, TypeState, 1, &State{Key: "k"})
	hdr := func(length uint32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, length), rest...)
	}
	cases := []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"too large", hdr(DefaultMaxFrame), 0, ErrFrameTooLarge},
		{"too large for limit", good, len(good) - 1, ErrFrameTooLarge},
		{"huge length", hdr(0xFFFFFFFF), 0, ErrFrameTooLarge},
		{"length below header", hdr(9), 0, ErrBadLength},
		{"zero length", hdr(0), 0, ErrBadLength},
		{"bad version early", hdr(100, 2), 0, ErrBadVersion},
		{"bad version 0", hdr(10, 0, 1), 0, ErrBadVersion},
	}
	for _, tc := range cases {
		f, n, err := ParseFrame(tc.b, tc.max)
		if !errors.Is(err, tc.want) || n != 0 || f.Body != nil {
			t.Errorf("%s: got %v n=%d, want %v", tc.name, err, n, tc.want)
		}
	}
	// The limit is inclusive.
	if _, n, err := ParseFrame(good, len(good)); err != nil || n != len(good) {
		t.Fatalf("exact limit: %d %v", n, err)
	}
	// A header-only frame (empty body) parses; its body then fails to decode.
	empty := hdr(10, Version, byte(TypeHeartbeat), 0, 0, 0, 0, 0, 0, 0, 1)
	f, n, err := ParseFrame(empty, 0)
	if err != nil || n != HeaderSize || len(f.Body) != 0 {
		t.Fatalf("empty body: %v %d %v", f, n, err)
	}
	if _, err := Decode(f.Type, f.Body); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty body decode: %v", err)
	}
}

func TestParseFrameUnknownType(t *testing.T) {
	b := mustFrame(t, TypeState, 4, &State{Key: "k"})
	b[5] = 0x3e
	f, n, err := ParseFrame(b, 0)
	if err != nil || n != len(b) || f.Type != 0x3e || f.Type.Known() {
		t.Fatalf("%v %d %v", f, n, err)
	}
	if _, err := Decode(f.Type, f.Body); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("Decode: %v", err)
	}
}

func TestReadFrame(t *testing.T) {
	var stream []byte
	stream = append(stream, mustFrame(t, TypeState, 1, &State{Key: "a"})...)
	stream = append(stream, mustFrame(t, TypeState, 2, &State{Key: strings.Repeat("b", 1000)})...)
	r := bufio.NewReader(bytes.NewReader(stream))
	var buf []byte
	for i := uint64(1); i <= 2; i++ {
		var f Frame
		var err error
		f, buf, err = ReadFrame(r, buf, 0)
		if err != nil || f.ReqID != i || f.Type != TypeState {
			t.Fatalf("frame %d: %v %v", i, f, err)
		}
		if _, err := Decode(f.Type, f.Body); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := ReadFrame(r, buf, 0); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	first := len(mustFrame(t, TypeState, 1, &State{Key: "a"}))
	for cut := 1; cut < first; cut++ {
		_, _, err := ReadFrame(bytes.NewReader(stream[:cut]), nil, 0)
		if cut < 4 && err != io.ErrUnexpectedEOF && err != io.EOF || cut >= 4 && err != io.ErrUnexpectedEOF {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
	bad := mustFrame(t, TypeState, 1, &State{Key: "a"})
	bad[4] = 9
	if _, _, err := ReadFrame(bytes.NewReader(bad), nil, 0); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("version: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(stream), nil, 16); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("limit: %v", err)
	}
}

func TestAppendFrameErrors(t *testing.T) {
	prefix := []byte("keep")
	var nilAcq *Acquire
	for _, tc := range []struct {
		typ Type
		m   Message
	}{
		{TypeRelease, &Acquire{}},
		{TypeAcquire, nilAcq},
		{TypeAcquire, nil},
		{Type(0x30), &Acquire{}},
		{TypeView, &Response{}},
	} {
		out, err := AppendFrame(prefix, tc.typ, 1, tc.m)
		if !errors.Is(err, ErrTypeMismatch) || string(out) != "keep" {
			t.Errorf("%s/%T: %v %q", tc.typ, tc.m, err, out)
		}
	}
	// Both view types take a View.
	for _, typ := range []Type{TypeView, TypeViewChanged} {
		if _, err := AppendFrame(nil, typ, 0, &View{}); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
	c := &Codec{MaxFrame: 64}
	out, err := c.AppendFrame(prefix, TypeState, 1, &State{Key: strings.Repeat("x", 64)})
	if !errors.Is(err, ErrFrameTooLarge) || string(out) != "keep" {
		t.Fatalf("too large: %v %q", err, out)
	}
	if _, err := AppendBody(nil, nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("AppendBody(nil): %v", err)
	}
	if err := DecodeInto([]byte{0x90}, nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("DecodeInto(nil): %v", err)
	}
}

func TestAppendFrameAppends(t *testing.T) {
	a := mustFrame(t, TypeState, 1, &State{Key: "a"})
	b := mustFrame(t, TypeState, 2, &State{Key: "b"})
	both, err := AppendFrame(append([]byte(nil), a...), TypeState, 2, &State{Key: "b"})
	if err != nil || !bytes.Equal(both, append(a, b...)) {
		t.Fatalf("%v % x", err, both)
	}
}

// TestReadFrameGrowsWithArrivals: a header declaring a frame of almost
// 1 MiB followed by a few bytes and the end of the stream leaves ReadFrame
// holding a buffer the size of what arrived (rounded up to a chunk), not
// the declared length; a whole large frame still reads, read a byte at a
// time.
func TestReadFrameGrowsWithArrivals(t *testing.T) {
	const declared = DefaultMaxFrame - 16
	hdr := appendHeader(nil, TypeState, 7)
	binary.BigEndian.PutUint32(hdr, uint32(declared-4))
	stream := append(hdr, make([]byte, 100)...)
	_, buf, err := ReadFrame(bytes.NewReader(stream), nil, 0)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("half-sent frame: %v", err)
	}
	if cap(buf) > 2*readChunk {
		t.Fatalf("half-sent frame declaring %d bytes left a buffer of %d bytes (at most %d)", declared, cap(buf), 2*readChunk)
	}
	whole := append(hdr, make([]byte, declared-HeaderSize)...)
	f, buf, err := ReadFrame(iotest.OneByteReader(bytes.NewReader(whole)), nil, 0)
	if err != nil || f.ReqID != 7 || len(f.Body) != declared-HeaderSize || len(buf) != declared {
		t.Fatalf("whole frame: %v, body %d, buf %d", err, len(f.Body), len(buf))
	}
	if cap(buf) > declared {
		t.Fatalf("buffer %d beyond the frame's %d bytes", cap(buf), declared)
	}
}
