package wire

import (
	"hash/fnv"
	"testing"
)

// refKeyHash computes the specified hash with the standard library.
func refKeyHash(ns, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ns))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return h.Sum64()
}

func TestKeyHashMatchesFNV1a(t *testing.T) {
	cases := [][2]string{
		{"", ""}, {"orders", "order:42"}, {"a", "b"}, {"ab", ""}, {"", "ab"},
		{"ns", string([]byte{0, 1, 255})}, {"tenant-1", "\u00e9t\u00e9"},
	}
	for _, c := range cases {
		if got, want := KeyHash(c[0], c[1]), refKeyHash(c[0], c[1]); got != want {
			t.Errorf("KeyHash(%q, %q) = %#x, want %#x", c[0], c[1], got, want)
		}
	}
	// Pinned values: changing the hash would move every lock to another
	// group, so a change must be deliberate.
	if got := KeyHash("orders", "order:42"); got != 0x78cd179d309e0640 {
		t.Errorf("KeyHash(orders, order:42) = %#x", got)
	}
	// The separator keeps the namespace/key boundary.
	if KeyHash("ab", "c") == KeyHash("a", "bc") {
		t.Error("boundary not separated")
	}
}

func TestKeyHashNoAlloc(t *testing.T) {
	ns, key := "orders", "order:42:with-a-longer-suffix"
	if n := testing.AllocsPerRun(100, func() { _ = KeyHash(ns, key) }); n != 0 {
		t.Fatalf("KeyHash allocates %v", n)
	}
}

func TestGroupAndWorker(t *testing.T) {
	if GroupOf(123, 0) != 0 || GroupOf(123, -1) != 0 || WorkerOf(123, 0) != 0 || WorkerOf(1, -5) != 0 {
		t.Fatal("non-positive counts must give 0")
	}
	if GroupOf(17, 15) != 2 || WorkerOf(17<<32|5, 15) != 2 {
		t.Fatal("definition")
	}
	// With 15 groups and 5 workers, the keys of one group must still
	// spread over every worker (they would not with h%workers).
	const groups, workers = DefaultGroups, 5
	var seen [groups][workers]int
	for i := 0; i < 20000; i++ {
		h := KeyHash("ns", "key-"+string(rune('a'+i%26))+itoa(i))
		g, w := GroupOf(h, groups), WorkerOf(h, workers)
		if g < 0 || g >= groups || w < 0 || w >= workers {
			t.Fatalf("out of range: %d %d", g, w)
		}
		seen[g][w]++
	}
	for g := range seen {
		for w, n := range seen[g] {
			if n < 100 {
				t.Errorf("group %d worker %d got only %d keys of 20000", g, w, n)
			}
		}
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

func TestTokens(t *testing.T) {
	tok := MakeToken(3, 77)
	if tok != 3<<48|77 {
		t.Fatalf("%#x", tok)
	}
	if gv, in := SplitToken(tok); gv != 3 || in != 77 {
		t.Fatalf("%d %d", gv, in)
	}
	// Instance bits above 48 are dropped, never spill into the version.
	if gv, _ := SplitToken(MakeToken(1, 1<<48|5)); gv != 1 {
		t.Fatal("instance overflowed into the group version")
	}
	// A higher group version orders above any instance of a lower one.
	if !(MakeToken(2, 0) > MakeToken(1, 1<<48-1)) {
		t.Fatal("order")
	}
}

func TestValidateWeight(t *testing.T) {
	for w := 0; w < 256; w++ {
		err := ValidateWeight(uint8(w))
		if (w >= MinWeight && w <= MaxWeight) != (err == nil) {
			t.Errorf("weight %d: %v", w, err)
		}
	}
}
