package wire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// bigRegistryTables is tables with n namespaces, each with a verifier of
// the sizes SCRAM-SHA-256 gives, and a few clusters and moves.
func bigRegistryTables(n int) *RegistryTables {
	t := &RegistryTables{Version: 99}
	for i := range 3 {
		t.Clusters = append(t.Clusters, RegistryCluster{Name: fmt.Sprintf("c%d", i), Client: []string{"a:1", "b:2"}, Admin: []string{"a:3"}, CA: "ca"})
	}
	for i := range n {
		t.Namespaces = append(t.Namespaces, RegistryNamespace{Name: fmt.Sprintf("namespace-%08d", i), Cluster: "c1", Epoch: uint64(i),
			Iters: 4096, Salt: string(make([]byte, 16)), StoredKey: string(make([]byte, 32)), ServerKey: string(make([]byte, 32))})
	}
	for i := range 50 {
		t.Moves = append(t.Moves, RegistryMove{Namespace: fmt.Sprintf("namespace-%08d", i), From: "c1", To: "c2", ID: 1, State: 1})
	}
	return t
}

// TestRegistryPagesUnderFrameLimit: 20,000 namespaces with verifiers take
// several pages, each page's frame is under RegistryPageBytes plus its
// header (so under DefaultMaxFrame), and the pages, each decoded from its
// frame, gather back into exactly the tables.
func TestRegistryPagesUnderFrameLimit(t *testing.T) {
	t.Parallel()
	in := bigRegistryTables(20000)
	pages := PageRegistryTables(in, 0)
	if len(pages) < 3 {
		t.Fatalf("%d pages for 20,000 namespaces, want several", len(pages))
	}
	var a RegistryAssembly
	var got *RegistryTables
	for i := range pages {
		frame, err := AppendFrame(nil, TypeRegistryTables, 3, &pages[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(frame) > RegistryPageBytes+HeaderSize || len(frame) > DefaultMaxFrame {
			t.Fatalf("page %d: frame of %d bytes, over %d", i, len(frame), RegistryPageBytes+HeaderSize)
		}
		f, _, err := ParseFrame(frame, DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		p := new(RegistryTables)
		if err := DecodeInto(f.Body, p); err != nil {
			t.Fatal(err)
		}
		if p.Page != uint32(i) || p.More != (i < len(pages)-1) || !p.Paged {
			t.Fatalf("page %d: Page %d More %v Paged %v", i, p.Page, p.More, p.Paged)
		}
		got, err = a.Add(p)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if (got != nil) != (i == len(pages)-1) {
			t.Fatalf("page %d of %d: complete %v", i, len(pages), got != nil)
		}
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("gathered tables differ: %d clusters %d namespaces %d moves", len(got.Clusters), len(got.Namespaces), len(got.Moves))
	}
}

// TestRegistryPageEmptyAndBigEntry: empty tables are one page; an entry
// over the budget gets a page of its own.
func TestRegistryPageEmptyAndBigEntry(t *testing.T) {
	t.Parallel()
	pages := PageRegistryTables(&RegistryTables{Version: 4}, 0)
	if len(pages) != 1 || pages[0].More || !pages[0].Paged || pages[0].Version != 4 {
		t.Fatalf("empty tables: %+v", pages)
	}
	in := &RegistryTables{Version: 5, Clusters: []RegistryCluster{{Name: "a", CA: string(make([]byte, 100))}, {Name: "b", CA: string(make([]byte, 2000))}, {Name: "c"}}}
	pages = PageRegistryTables(in, 1000)
	if len(pages) != 3 || len(pages[1].Clusters) != 1 || pages[1].Clusters[0].Name != "b" {
		t.Fatalf("big entry: %d pages %+v", len(pages), pages)
	}
}

// TestRegistryAssemblyRefusesMix: a page of another version, a page out
// of order, a repeated or unordered name, all refused ErrRegistryPage and
// drop what was gathered; page 0 starts over.
func TestRegistryAssemblyRefusesMix(t *testing.T) {
	t.Parallel()
	v1 := PageRegistryTables(bigRegistryTables(6000), 0)
	v2 := bigRegistryTables(6000)
	v2.Version++
	p2 := PageRegistryTables(v2, 0)
	if len(v1) < 3 {
		t.Fatalf("%d pages", len(v1))
	}
	cases := map[string][]RegistryTables{
		"another version": {v1[0], p2[1]},
		"a page skipped":  {v1[0], v1[2]},
		"a page repeated": {v1[0], v1[0], v1[1], v1[1]},
		"no page 0":       {v1[1]},
	}
	for name, seq := range cases {
		var a RegistryAssembly
		var err error
		for i := range seq {
			if _, err = a.Add(&seq[i]); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrRegistryPage) {
			t.Errorf("%s: %v, want ErrRegistryPage", name, err)
		}
		if v, p := a.Next(); v != 0 || p != 0 {
			t.Errorf("%s: still gathering %d/%d after the error", name, v, p)
		}
	}
	dup := RegistryTables{Version: 1, Paged: true, Namespaces: []RegistryNamespace{{Name: "b"}, {Name: "a"}}}
	var a RegistryAssembly
	if _, err := a.Add(&dup); !errors.Is(err, ErrRegistryPage) {
		t.Errorf("unordered names: %v", err)
	}
	if _, err := a.Add(&RegistryTables{Version: 1}); !errors.Is(err, ErrRegistryPage) {
		t.Errorf("unpaged tables: %v", err)
	}
}

// TestRegistryEarlierProtocolForms: unpaged messages encode exactly as
// the earlier protocol's (1 and 5 fields), whose decoders skip the extra
// fields of the paged forms; and the earlier forms decode as unpaged.
func TestRegistryEarlierProtocolForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    Message
		want int
	}{
		{&SubscribeRegistry{Version: 3}, 1},
		{&SubscribeRegistry{Version: 3, Paged: true, Page: 2}, 3},
		{&RegistryTables{Version: 3}, 5},
		{&RegistryTables{Version: 3, Paged: true, Page: 1, More: true}, 8},
	} {
		b, err := AppendBody(nil, c.m)
		if err != nil {
			t.Fatal(err)
		}
		n, err := msgpack.NewDecoder(bytes.NewReader(b)).DecodeArrayLen()
		if err != nil || n != c.want {
			t.Errorf("%T %+v: %d fields (%v), want %d", c.m, c.m, n, err, c.want)
		}
		checkRoundTrip(t, typeOf(c.m), c.m)
	}
	if err := (&SubscribeRegistry{Page: 1}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("a page without Paged: %v", err)
	}
}

func typeOf(m Message) Type {
	if _, ok := m.(*SubscribeRegistry); ok {
		return TypeSubscribeRegistry
	}
	return TypeRegistryTables
}

// FuzzRegistryAssembly feeds a RegistryAssembly pages decoded from
// arbitrary bodies (what a meta node sends a registry): it never panics,
// every error is ErrRegistryPage, and gathered tables keep the bounds
// and each list's strictly ascending names.
func FuzzRegistryAssembly(f *testing.F) {
	for _, p := range PageRegistryTables(bigRegistryTables(2000), 0) {
		b, err := AppendBody(nil, &p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	f.Fuzz(func(t *testing.T, b1, b2 []byte) {
		var a RegistryAssembly
		for _, b := range [][]byte{b1, b2, b1} {
			p := new(RegistryTables)
			if DecodeInto(b, p) != nil {
				continue
			}
			got, err := a.Add(p)
			if err != nil {
				if !errors.Is(err, ErrRegistryPage) {
					t.Fatalf("error %v does not wrap ErrRegistryPage", err)
				}
				continue
			}
			if got == nil {
				continue
			}
			if len(got.Clusters) > MaxRegistryClusters || len(got.Namespaces) > MaxRegistryNamespaces {
				t.Fatalf("tables over the bounds")
			}
			for i := 1; i < len(got.Namespaces); i++ {
				if got.Namespaces[i-1].Name >= got.Namespaces[i].Name {
					t.Fatalf("namespaces out of order")
				}
			}
		}
	})
}
