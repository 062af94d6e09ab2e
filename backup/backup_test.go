package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/codec"
)

// write writes a two-group backup: group 0 with two locks, another pair
// and the group version 3; group 1 empty.
func write(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Cluster: "c", Time: time.Unix(1e9, 0).UTC(), Node: 1, Groups: 2})
	if err != nil {
		t.Fatal(err)
	}
	var chunk []byte
	chunk = codec.AppendPair(chunk, []byte("lns/a"), []byte{1})
	chunk = codec.AppendPair(chunk, []byte("lns/b"), []byte{2})
	chunk = codec.AppendPair(chunk, []byte("nns"), []byte{3})
	chunk = codec.AppendPair(chunk, VersionKey, binary.AppendUvarint(nil, 3))
	if _, err := w.StartGroup(10, true); err != nil {
		t.Fatal(err)
	}
	if err := w.Pairs(chunk); err != nil {
		t.Fatal(err)
	}
	if g, err := w.EndGroup(); err != nil || g != (Group{Group: 0, Applied: 10, Master: true, Version: 3, Locks: 2, Pairs: 4}) {
		t.Fatalf("group 0: %+v, %v", g, err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("closed with a group missing")
	}
	w.closed = false
	if _, err := w.StartGroup(7, false); err != nil {
		t.Fatal(err)
	}
	if _, err := w.EndGroup(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRoundTrip: Read finds what Writer wrote, counts and all, and hands
// every pair and chunk to the visitor.
func TestRoundTrip(t *testing.T) {
	b := write(t)
	var pairs, chunks int
	info, err := Read(bytes.NewReader(b), Visitor{
		Pair:  func(int, []byte, []byte) error { pairs++; return nil },
		Pairs: func(int, []byte) error { chunks++; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.Header.Cluster != "c" || info.Header.Format != Format || len(info.Groups) != 2 || info.Groups[0].Locks != 2 || pairs != 4 || chunks != 1 {
		t.Fatalf("read %+v, %d pairs, %d chunks", info, pairs, chunks)
	}
	stop := errors.New("stop")
	if _, err := Read(bytes.NewReader(b), Visitor{Pair: func(int, []byte, []byte) error { return stop }}); !errors.Is(err, stop) {
		t.Fatalf("a visitor's error: %v", err)
	}
}

// TestReadRefusesDamage: every single-byte change and every truncation is
// ErrBad.
func TestReadRefusesDamage(t *testing.T) {
	b := write(t)
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		if _, err := Read(bytes.NewReader(bad), Visitor{}); !errors.Is(err, ErrBad) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if _, err := Read(bytes.NewReader(b[:i]), Visitor{}); !errors.Is(err, ErrBad) {
			t.Fatalf("truncated to %d: %v", i, err)
		}
	}
	if _, err := Read(bytes.NewReader(append(bytes.Clone(b), 0)), Visitor{}); !errors.Is(err, ErrBad) {
		t.Fatalf("a byte after the checksum: %v", err)
	}
}
