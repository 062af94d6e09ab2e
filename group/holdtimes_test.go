package group

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// checkHoldTimes fails t unless ht's heap is ordered, every slot knows its
// place in it, every key's chain holds exactly its slots and the free
// chain the rest.
func checkHoldTimes(t *testing.T, ht *holdTimes) {
	t.Helper()
	for p, i := range ht.heap {
		if ht.slots[i].pos != int32(p) {
			t.Fatalf("heap entry %d is slot %d, which says %d", p, i, ht.slots[i].pos)
		}
		if p > 0 && ht.slots[ht.heap[(p-1)/2]].at > ht.slots[i].at {
			t.Fatalf("heap entry %d before its parent", p)
		}
	}
	seen := 0
	for h, head := range ht.byKey {
		for i := head; i >= 0; i = ht.slots[i].next {
			if s := &ht.slots[i]; ht.hash(ht.keyOf(s)) != h || s.gen == 0 {
				t.Fatalf("slot %d (%q, in use %v) in the chain of hash %x", i, ht.keyOf(s), s.gen != 0, h)
			}
			seen++
		}
	}
	conns := 0
	for _, r := range ht.conns {
		if r != nil {
			conns += int(r.holds)
		}
	}
	named := 0
	for i := range ht.slots {
		if s := &ht.slots[i]; s.conn >= 0 {
			if r := ht.conns[s.conn]; r == nil || r.id != s.conn {
				t.Fatalf("slot %d names connection %d, which is not numbered so", i, s.conn)
			}
			named++
		}
	}
	if conns != named {
		t.Fatalf("%d slots name a connection, the connections count %d", named, conns)
	}
	free := 0
	for i := ht.free; i >= 0; i = ht.slots[i].next {
		free++
	}
	if seen != ht.live || seen+free != len(ht.slots) {
		t.Fatalf("%d slots chained, %d free, live %d, %d slots", seen, free, ht.live, len(ht.slots))
	}
}

// TestHoldTimesModel: random sets, renewals, connection changes, drops
// and pops agree with a plain map of deadlines, keys holding several
// holds included, keys whose hashes collide (hashes narrowed to 6 bits)
// included, and the slots and key bytes shrink once most holds ended.
func TestHoldTimesModel(t *testing.T) {
	t.Parallel()
	for _, mask := range []uint32{math.MaxUint32, 0x3f} {
		t.Run(fmt.Sprintf("mask=%x", mask), func(t *testing.T) { holdTimesModel(t, mask) })
	}
}

func holdTimesModel(t *testing.T, mask uint32) {
	rnd := rand.New(rand.NewPCG(1, 2))
	ht := newHoldTimes()
	ht.mask = mask
	const gen = 1
	refs := []*sinkRef{nil, {id: -1}, {id: -1}, {id: -1}}
	type id struct {
		key   string
		owner wire.Owner
	}
	model := map[id]int64{} // deadline of a queued hold; -1 once popped
	ids := make([]id, 0, 6000)
	for i := range 6000 {
		ids = append(ids, id{fmt.Sprint("k", i/3), wire.Owner{Client: 1, ID: uint64(i)}})
	}
	for step := range 60000 {
		x := ids[rnd.IntN(len(ids))]
		switch op := rnd.IntN(10); {
		case op < 6:
			i := ht.find(x.key, x.owner, 1)
			if i < 0 {
				i = ht.add(x.key, gen, x.owner, 1)
			}
			ht.setConn(i, refs[rnd.IntN(len(refs))])
			at := 1 + rnd.Int64N(1e6)
			ht.setAt(i, at)
			model[x] = at
		case op < 9:
			ht.dropHold(x.key, x.owner, 1)
			delete(model, x)
		default:
			if ht.next() < 0 {
				continue
			}
			i := ht.next()
			if k := ht.keyOf(&ht.slots[i]); ht.find(k, ht.slots[i].owner, 1) != i {
				t.Fatalf("step %d: slot %d of %q is not found by its key", step, i, k)
			}
			e := ht.pop()
			got := id{e.key, e.owner}
			for y, at := range model {
				if at >= 0 && at < e.at {
					t.Fatalf("step %d: popped %v at %d before %v at %d", step, got, e.at, y, at)
				}
			}
			if model[got] != e.at {
				t.Fatalf("step %d: popped %v at %d, set at %d", step, got, e.at, model[got])
			}
			model[got] = -1
		}
		if step%997 == 0 {
			checkHoldTimes(t, &ht)
		}
	}
	checkHoldTimes(t, &ht)
	if ht.live != len(model) {
		t.Fatalf("%d slots live, %d holds", ht.live, len(model))
	}
	for x := range model {
		ht.dropHold(x.key, x.owner, 1)
	}
	checkHoldTimes(t, &ht)
	if ht.live != 0 || len(ht.heap) != 0 || len(ht.byKey) != 0 || len(ht.slots) >= minCompact {
		t.Fatalf("after every drop: %d live, %d queued, %d keys, %d slots", ht.live, len(ht.heap), len(ht.byKey), len(ht.slots))
	}
	for _, r := range refs[1:] {
		if r.holds != 0 || r.id != -1 {
			t.Fatalf("after every drop a connection counts %d holds, numbered %d", r.holds, r.id)
		}
	}
}

// TestHoldTimesKeysCompact: the key bytes of ended holds are given back
// once most of them are dead, and the live holds keep their keys.
func TestHoldTimesKeysCompact(t *testing.T) {
	t.Parallel()
	ht := newHoldTimes()
	o := owner(1, 1)
	const n = 4 * minKeyCompact / 16 // 16-byte keys: four times the threshold
	for i := range n {
		ht.setAt(ht.add(fmt.Sprintf("ns\x00key-%09d", i), 1, o, uint64(i)), int64(i+1))
	}
	for i := range n {
		if i%16 != 0 {
			ht.dropHold(fmt.Sprintf("ns\x00key-%09d", i), o, uint64(i))
		}
	}
	if got, limit := len(ht.keys), 2*16*(n/16+1)+minKeyCompact; got > limit {
		t.Fatalf("%d key bytes kept for %d holds of 16 bytes, want at most %d", got, n/16, limit)
	}
	for i := 0; i < n; i += 16 {
		if ht.find(fmt.Sprintf("ns\x00key-%09d", i), o, uint64(i)) < 0 {
			t.Fatalf("hold %d lost its slot", i)
		}
	}
	checkHoldTimes(t, &ht)
}

// TestHoldTimesKeyLimit: an add that would take keys past its bound
// compacts it first, and every live hold keeps its key.
func TestHoldTimesKeyLimit(t *testing.T) {
	t.Parallel()
	ht := newHoldTimes()
	ht.keyLimit = 1024
	o := owner(1, 1)
	key := func(i int) string { return fmt.Sprintf("ns\x00key-%09d", i) } // 16 bytes, 18 kept
	for i := range 4096 {
		ht.setAt(ht.add(key(i), 1, o, uint64(i)), int64(i+1))
		if i >= 8 {
			ht.dropHold(key(i-8), o, uint64(i-8)) // 8 live: 144 bytes
		}
		if len(ht.keys) > ht.keyLimit {
			t.Fatalf("after add %d: %d key bytes, bound %d", i, len(ht.keys), ht.keyLimit)
		}
	}
	for i := 4096 - 8; i < 4096; i++ {
		if j := ht.find(key(i), o, uint64(i)); j < 0 || ht.keyOf(&ht.slots[j]) != key(i) {
			t.Fatalf("hold %d lost its key", i)
		}
	}
	checkHoldTimes(t, &ht)
}

// TestHoldSlotIsPointerFree: what grows with the holds in holdTimes
// holds no pointer, so that the collector never scans it (a million held
// keys' slots are tens of megabytes).
func TestHoldSlotIsPointerFree(t *testing.T) {
	t.Parallel()
	var walk func(ty reflect.Type) bool
	walk = func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				if !walk(ty.Field(i).Type) {
					return false
				}
			}
			return true
		case reflect.Array:
			return walk(ty.Elem())
		case reflect.Bool, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int,
			reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint, reflect.Uintptr:
			return true
		}
		return false
	}
	ht := reflect.TypeFor[holdTimes]()
	for _, name := range []string{"slots", "heap", "keys"} {
		f, _ := ht.FieldByName(name)
		if f.Type.Kind() != reflect.Slice || !walk(f.Type.Elem()) {
			t.Errorf("holdTimes.%s (%v) holds pointers", name, f.Type)
		}
	}
	if f, _ := ht.FieldByName("byKey"); f.Type.Kind() != reflect.Map || !walk(f.Type.Key()) || !walk(f.Type.Elem()) {
		t.Errorf("holdTimes.byKey (%v) holds pointers", f.Type)
	}
	if n := reflect.TypeFor[holdSlot]().Size(); n > 64 {
		t.Errorf("holdSlot is %d bytes, want at most 64", n)
	}
}
