package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

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
	for key, head := range ht.byKey {
		for i := head; i >= 0; i = ht.slots[i].next {
			if s := &ht.slots[i]; s.key != key || s.rec == nil {
				t.Fatalf("slot %d (%q, in use %v) in the chain of %q", i, s.key, s.rec != nil, key)
			}
			seen++
		}
	}
	free := 0
	for i := ht.free; i >= 0; i = ht.slots[i].next {
		free++
	}
	if seen != ht.live || seen+free != len(ht.slots) {
		t.Fatalf("%d slots chained, %d free, live %d, %d slots", seen, free, ht.live, len(ht.slots))
	}
}

// TestHoldTimesModel: random sets, renewals, drops and pops agree with a
// plain map of deadlines, keys holding several holds included, and the
// slots shrink once most holds ended.
func TestHoldTimesModel(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	ht := newHoldTimes()
	rec := &lockRec{}
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
				i = ht.add(x.key, rec, x.owner, 1)
			}
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
}

// TestHoldSlotSharesTheTableKey: a hold's slot keeps the lock table's
// own key string, not the copy its request came with, so that a held key
// costs its bytes once on the master.
func TestHoldSlotSharesTheTableKey(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	r.master(true)
	o := owner(1, 1)
	key := fullKey("ns", "shared")
	out := r.apply(1, command{op: opAcquire, key: key, owner: o, ttlMs: 1000})
	if out.status != wire.StatusSuccess {
		t.Fatal(out.status)
	}
	reqKey := fullKey("ns", string([]byte("shared"))) // another copy of the bytes
	r.w.armDeadline(reqKey, out.token, o, nil, r.fc.Now().Add(time.Second))
	i := r.w.times.find(key, o, out.token)
	if i < 0 {
		t.Fatal("no slot for the hold")
	}
	s := r.w.g.sm.shardOf(key)
	s.mu.RLock()
	own := s.ownKey(reqKey)
	s.mu.RUnlock()
	if unsafe.StringData(own) == unsafe.StringData(reqKey) {
		t.Fatal("the table's key is the request's copy: the test proves nothing")
	}
	if got := r.w.times.slots[i].key; unsafe.StringData(got) != unsafe.StringData(own) {
		t.Errorf("the slot keeps its own copy of %q, not the table's", got)
	}
}
