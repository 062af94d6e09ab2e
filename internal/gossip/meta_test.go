package gossip

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

func TestMetaRoundTrip(t *testing.T) {
	in := NodeMeta{
		ID:         7,
		ClientAddr: "10.0.0.7:7100",
		PeerAddr:   "10.0.0.7:7200",
		Groups:     []GroupEpoch{{Group: 9, Epoch: 1 << 40}, {Group: 0, Epoch: 3}, {Group: 14, Epoch: 0}},
		Leaving:    true,
	}
	b, truncated, err := EncodeMeta(in)
	if err != nil || truncated {
		t.Fatalf("EncodeMeta: truncated=%v err=%v", truncated, err)
	}
	if b[0] != MetaVersion {
		t.Fatalf("version byte %d", b[0])
	}
	out, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Groups = []GroupEpoch{{0, 3}, {9, 1 << 40}, {14, 0}} // sorted by group
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got %+v want %+v", out, want)
	}
	if in.Groups[0].Group != 9 {
		t.Fatal("EncodeMeta reordered the caller's slice")
	}
	// Trailing bytes (fields of a later version) are skipped.
	if out2, err := DecodeMeta(append(b, 1, 2, 3)); err != nil || !reflect.DeepEqual(out2, want) {
		t.Fatalf("trailing bytes: %+v %v", out2, err)
	}
}

func TestMetaFifteenGroupsIsSmall(t *testing.T) {
	m := NodeMeta{ID: 3, ClientAddr: "paxlock-node-3.example.internal:7100", PeerAddr: "paxlock-node-3.example.internal:7200"}
	for g := range 15 {
		m.Groups = append(m.Groups, GroupEpoch{Group: g, Epoch: uint64(1_000_000 + g)})
	}
	b, truncated, err := EncodeMeta(m)
	if err != nil || truncated {
		t.Fatalf("truncated=%v err=%v", truncated, err)
	}
	t.Logf("15 groups with long host names: %d bytes", len(b))
	if len(b) > 200 {
		t.Fatalf("encoding is not compact: %d bytes", len(b))
	}
}

func TestMetaOversizeDropsGroups(t *testing.T) {
	long := strings.Repeat("h", 200) + ":7100"
	m := NodeMeta{ID: 1, ClientAddr: long, PeerAddr: long}
	for g := range 64 {
		m.Groups = append(m.Groups, GroupEpoch{Group: g, Epoch: 1 << 50})
	}
	b, truncated, err := EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	if !truncated || len(b) > MaxMetaSize {
		t.Fatalf("truncated=%v len=%d", truncated, len(b))
	}
	out, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !out.GroupsTruncated || len(out.Groups) != 0 || out.ClientAddr != long || out.ID != 1 {
		t.Fatalf("decoded %+v", out)
	}

	// 64 groups with small epochs and short addresses fit.
	m = NodeMeta{ID: 1, ClientAddr: "127.0.0.1:7100", PeerAddr: "127.0.0.1:7200"}
	for g := range 64 {
		m.Groups = append(m.Groups, GroupEpoch{Group: g, Epoch: 100})
	}
	if _, truncated, err := EncodeMeta(m); err != nil || truncated {
		t.Fatalf("64 small groups: truncated=%v err=%v", truncated, err)
	}
}

func TestMetaErrors(t *testing.T) {
	if _, _, err := EncodeMeta(NodeMeta{}); !errors.Is(err, ErrBadMeta) {
		t.Fatalf("zero id: %v", err)
	}
	if _, _, err := EncodeMeta(NodeMeta{ID: 1, Groups: []GroupEpoch{{Group: wire.MaxViewGroups}}}); !errors.Is(err, ErrBadMeta) {
		t.Fatalf("group out of range: %v", err)
	}
	if _, _, err := EncodeMeta(NodeMeta{ID: 1, Groups: []GroupEpoch{{Group: -1}}}); !errors.Is(err, ErrBadMeta) {
		t.Fatalf("negative group: %v", err)
	}
	if _, _, err := EncodeMeta(NodeMeta{ID: 1, ClientAddr: strings.Repeat("x", MaxAddrLen+1)}); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("long address: %v", err)
	}
	// Two addresses of MaxAddrLen fit (about 2*257 bytes + header > 512?):
	// if not, it is ErrMetaTooLarge, never a panic or an oversize result.
	b, _, err := EncodeMeta(NodeMeta{ID: 1, ClientAddr: strings.Repeat("x", MaxAddrLen), PeerAddr: strings.Repeat("y", MaxAddrLen)})
	if err == nil && len(b) > MaxMetaSize {
		t.Fatalf("oversize result %d", len(b))
	}
	if err != nil && !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("two max addresses: %v", err)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 1}, {1, 0}, {1, 0, 0}, {1, 0, 1, 5, 'a'}, {1, 0, 1, 0, 0, 200}, {1, 0, 1, 0, 0, 1, 0x80}} {
		if _, err := DecodeMeta(bad); !errors.Is(err, ErrBadMeta) {
			t.Errorf("DecodeMeta(%v) = %v, want ErrBadMeta", bad, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	b, _, _ := EncodeMeta(NodeMeta{ID: 2, ClientAddr: "a:1", PeerAddr: "b:2", Groups: []GroupEpoch{{1, 2}, {3, 4}}})
	f.Add(b)
	f.Add([]byte{1, 3, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes within the limit and decodes the same.
		m.GroupsTruncated = false
		b2, truncated, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", m, err)
		}
		if len(b2) > MaxMetaSize {
			t.Fatalf("re-encoded %d bytes", len(b2))
		}
		m2, err := DecodeMeta(b2)
		if err != nil {
			t.Fatal(err)
		}
		if !truncated && len(m2.Groups) != len(m.Groups) {
			t.Fatalf("groups %d != %d", len(m2.Groups), len(m.Groups))
		}
	})
}
