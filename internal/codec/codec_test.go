package codec

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestPairs: EachPair reads back what AppendPair wrote, and refuses every
// truncation of it.
func TestPairs(t *testing.T) {
	b := AppendPair(AppendPair(nil, []byte("k1"), []byte("v1")), []byte{}, make([]byte, 300))
	var got []string
	if err := EachPair(b, func(k, v []byte) error { got = append(got, string(k)); return nil }); err != nil || len(got) != 2 || got[0] != "k1" || got[1] != "" {
		t.Fatalf("read %q, %v", got, err)
	}
	for i := 1; i < len(b); i++ {
		if i == 6 {
			continue // the end of the first pair: a whole list
		}
		if err := EachPair(b[:i], func(k, v []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d: %v", i, err)
		}
	}
}

// TestReader: a Reader reads back uvarints, bytes and fields in order, is
// Done only at the end of a whole record, and once a read runs past the
// end it stays failed and returns zero values.
func TestReader(t *testing.T) {
	b := binary.AppendUvarint([]byte{7}, 300)
	b = append(b, "abc"...)
	r := NewReader(b)
	if r.Byte() != 7 || r.Uvarint() != 300 || r.Done() || r.Len() != 3 {
		t.Fatalf("head misread: %+v", r)
	}
	if got := string(r.Bytes(3)); got != "abc" || !r.Done() {
		t.Fatalf("bytes %q, done %v", got, r.Done())
	}
	if r.Byte() != 0 || !r.Failed() || r.Done() {
		t.Fatal("a read past the end did not fail")
	}
	r = NewReader([]byte{0x80}) // a uvarint cut short
	if r.Uvarint() != 0 || !r.Failed() || string(r.Rest()) != "\x80" {
		t.Fatalf("a truncated uvarint: failed %v, rest %x", r.Failed(), r.Rest())
	}
	r = NewReader([]byte{1})
	if r.Bytes(2) != nil || !r.Failed() {
		t.Fatal("Bytes past the end did not fail")
	}
	r = NewReader(nil)
	r.Fail()
	if r.Done() {
		t.Fatal("Fail did not make the record bad")
	}
}
