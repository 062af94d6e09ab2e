package codec

import (
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
