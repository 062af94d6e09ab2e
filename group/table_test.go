package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestLockTableModel runs random sets and deletes against a plain map:
// every key held reads back its record at the address set returned, a
// set (new or replacing) hands out a generation never seen before, the
// count and the iteration match, and the index grows and shrinks with
// the keys (few keys in a small index wrap the probes around its end).
func TestLockTableModel(t *testing.T) {
	t.Parallel()
	for _, keys := range []int{10, 300, 20000} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			t.Parallel()
			rnd := rand.New(rand.NewPCG(uint64(keys), 7))
			var tab lockTable
			model := map[string]uint64{} // key -> token of its record
			addr := map[string]*lockRec{}
			seen := map[uint64]bool{}
			steps := min(40*keys, 200000)
			for step := range steps {
				k := fmt.Sprint("ns\x00k", rnd.IntN(keys))
				if rnd.IntN(3) == 0 {
					tab.delete(k)
					delete(model, k)
					delete(addr, k)
				} else {
					tok := uint64(step + 1)
					l := &lockRec{}
					l.add(holder{token: tok, ttlMs: 1}, "")
					p := tab.set(k, l)
					if seen[p.gen] || p.gen == 0 {
						t.Fatalf("step %d: generation %d handed out twice", step, p.gen)
					}
					seen[p.gen] = true
					if old, ok := addr[k]; ok && old != p {
						t.Fatalf("step %d: replacing %q moved its record", step, k)
					}
					model[k], addr[k] = tok, p
				}
				if step%(97+keys/10) == 0 || step == steps-1 {
					checkTable(t, &tab, model, addr)
				}
			}
			for k := range model {
				tab.delete(k)
			}
			if tab.len() != 0 || len(tab.index) > tableShrinkMin {
				t.Fatalf("emptied table: len %d, index of %d", tab.len(), len(tab.index))
			}
		})
	}
}

func checkTable(t *testing.T, tab *lockTable, model map[string]uint64, addr map[string]*lockRec) {
	t.Helper()
	if tab.len() != len(model) {
		t.Fatalf("len %d, want %d", tab.len(), len(model))
	}
	if len(model) > 0 && (len(model)*4 > len(tab.index)*3 || len(tab.index) > tableShrinkMin && len(model)*8 < len(tab.index)/2) {
		t.Fatalf("%d keys in an index of %d", len(model), len(tab.index))
	}
	for k, tok := range model {
		l := tab.get(k)
		if l == nil || l.first.token != tok || l != addr[k] {
			t.Fatalf("get(%q) = %p, want token %d at %p", k, l, tok, addr[k])
		}
	}
	n := 0
	for k, l := range tab.all() {
		if model[k] != l.first.token {
			t.Fatalf("all: %q with token %d, want %d", k, l.first.token, model[k])
		}
		n++
	}
	if n != len(model) {
		t.Fatalf("all yielded %d, want %d", n, len(model))
	}
	if tab.get("ns\x00absent") != nil {
		t.Fatal("an absent key read back")
	}
}

// TestLockTableReset checks that a reset table hands out no generation
// it handed out before (a deadline slot set before a checkpoint load
// must not match a record loaded after it) and that grow sizes the index
// for its keys at once.
func TestLockTableReset(t *testing.T) {
	t.Parallel()
	var tab lockTable
	first := tab.set("a\x00k", &lockRec{}).gen
	tab.reset()
	if tab.len() != 0 || tab.get("a\x00k") != nil {
		t.Fatal("a reset table still holds its key")
	}
	tab.grow(1000)
	size := len(tab.index)
	if size*3 < 1000*4 {
		t.Fatalf("grow(1000): index of %d", size)
	}
	for i := range 1000 {
		if l := tab.set(fmt.Sprint("a\x00k", i), &lockRec{}); l.gen <= first {
			t.Fatalf("generation %d after reset, had %d", l.gen, first)
		}
	}
	if len(tab.index) != size {
		t.Fatalf("index grew from %d to %d after grow", size, len(tab.index))
	}
}

// TestLockTableEntrySize keeps a held key's entry at 64 bytes: its key's
// string header and its record by value.
func TestLockTableEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(tableEntry{}); n != 64 {
		t.Fatalf("tableEntry is %d bytes, want 64", n)
	}
}

// BenchmarkLockTable measures a set and a delete of a fresh key among
// 100k held, and a get of a held one.
func BenchmarkLockTable(b *testing.B) {
	var tab lockTable
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprint("default\x00many-", i)
		tab.set(keys[i], &lockRec{})
	}
	l := &lockRec{}
	b.Run("set+delete", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			k := keys[i%len(keys)]
			tab.delete(k)
			tab.set(k, l)
		}
	})
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if tab.get(keys[i%len(keys)]) == nil {
				b.Fatal("missing")
			}
		}
	})
}
