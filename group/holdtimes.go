package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// holdSlot is the master's clock for one hold, kept by its worker (see
// holdTimes), never in the replicated record.
type holdSlot struct {
	// rec is the record the hold was in when its deadline was set. A
	// record that is replaced (a move in, a checkpoint loaded) or that
	// went and was made anew holds other holds, even under the same
	// name, so a slot counts only while the key's record is still rec.
	// It is compared, never read outside the shard's lock; nil marks a
	// free slot.
	rec   *lockRec
	key   string
	owner wire.Owner
	token uint64
	// at is the hold's deadline in nanoseconds on the worker's monotonic
	// clock (see worker.mono).
	at int64
	// age is how long before at the hold was granted (or this node
	// became master, whichever was later): the master reads the hold's
	// age at release from it, for metrics.
	age time.Duration
	// limit is the hold's hold limit on the same clock (see maxhold.go):
	// its deadline never passes it; 0 for none.
	limit int64
	// sink is whom to tell when the hold is lost: the connection its
	// grant or last renewal came over (nil: nobody).
	sink *sinkRef
	// pos is the slot's index in holdTimes.heap, -1 once its deadline
	// came up (an Expire is being decided) and until it is set again.
	pos int32
	// next is the next slot of the same key, or of the free list; -1
	// ends either.
	next int32
}

// holdTimes is a worker's deadline and age of every hold it set one for:
// master-only soft state. Each hold is one slot of one slice; its key's
// slots are chained from byKey (one entry per held key, whose string is
// the slot's), and the expiry heap is of slot numbers ordered by
// deadline, each slot knowing its place in it, so that a renewal moves
// its hold's deadline in place and a release takes it out: the heap holds
// exactly the holds whose deadline is pending, never stale entries.
type holdTimes struct {
	slots []holdSlot
	free  int32 // head of the free slots' chain, -1 when none
	live  int   // slots in use
	byKey map[string]int32
	heap  []int32
}

// minCompact is the slot count below which holdTimes never compacts.
const minCompact = 4096

func newHoldTimes() holdTimes { return holdTimes{free: -1, byKey: make(map[string]int32)} }

// reset forgets every hold and gives their memory back.
func (t *holdTimes) reset() { *t = newHoldTimes() }

// find returns the slot of the hold (key, o, token), -1 if none.
func (t *holdTimes) find(key string, o wire.Owner, token uint64) int32 {
	i, ok := t.byKey[key]
	if !ok {
		return -1
	}
	for ; i >= 0; i = t.slots[i].next {
		if s := &t.slots[i]; s.owner == o && s.token == token {
			return i
		}
	}
	return -1
}

// get returns the slot of the hold (key, o, token) if it was set on
// record rec; nil otherwise. The pointer is valid until t changes.
func (t *holdTimes) get(key string, rec *lockRec, o wire.Owner, token uint64) *holdSlot {
	if i := t.find(key, o, token); i >= 0 && t.slots[i].rec == rec {
		return &t.slots[i]
	}
	return nil
}

// add makes a slot for the hold (key, o, token) of record rec, not yet
// in the heap, and returns its number.
func (t *holdTimes) add(key string, rec *lockRec, o wire.Owner, token uint64) int32 {
	i := t.free
	if i >= 0 {
		t.free = t.slots[i].next
	} else {
		i = int32(len(t.slots))
		t.slots = append(t.slots, holdSlot{})
	}
	head, ok := t.byKey[key]
	if !ok {
		head = -1
	}
	t.slots[i] = holdSlot{rec: rec, key: key, owner: o, token: token, pos: -1, next: head}
	t.byKey[key] = i
	t.live++
	return i
}

// drop frees slot i, taking it out of the heap and its key's chain.
func (t *holdTimes) drop(i int32) {
	s := &t.slots[i]
	if s.pos >= 0 {
		t.unqueue(s.pos)
	}
	key := s.key
	if head := t.byKey[key]; head == i {
		if s.next >= 0 {
			t.byKey[key] = s.next
		} else {
			delete(t.byKey, key)
		}
	} else {
		p := head
		for t.slots[p].next != i {
			p = t.slots[p].next
		}
		t.slots[p].next = s.next
	}
	*s = holdSlot{pos: -1, next: t.free}
	t.free = i
	t.live--
	t.maybeCompact()
}

// dropHold frees the slot of the hold (key, o, token), if any.
func (t *holdTimes) dropHold(key string, o wire.Owner, token uint64) {
	if i := t.find(key, o, token); i >= 0 {
		t.drop(i)
	}
}

// dropKey frees every slot of key.
func (t *holdTimes) dropKey(key string) {
	for {
		i, ok := t.byKey[key]
		if !ok {
			return
		}
		t.drop(i)
	}
}

// setAt gives slot i deadline at and puts it in its place in the heap.
func (t *holdTimes) setAt(i int32, at int64) {
	s := &t.slots[i]
	s.at = at
	if s.pos < 0 {
		s.pos = int32(len(t.heap))
		t.heap = append(t.heap, i)
		t.up(int(s.pos))
		return
	}
	t.fix(int(s.pos))
}

// next returns the slot with the earliest pending deadline, -1 if none.
func (t *holdTimes) next() int32 {
	if len(t.heap) == 0 {
		return -1
	}
	return t.heap[0]
}

// pop takes the earliest pending deadline out of the heap and returns
// its hold as an expiry; the slot stays (pos -1) until the hold ends or
// its deadline is set again. The heap must not be empty.
func (t *holdTimes) pop() expiry {
	i := t.heap[0]
	t.unqueue(0)
	s := &t.slots[i]
	return expiry{at: s.at, key: s.key, token: s.token, owner: s.owner, sink: s.sink}
}

// unqueue takes heap entry p out of the heap.
func (t *holdTimes) unqueue(p int32) {
	h := t.heap
	n := len(h) - 1
	t.slots[h[p]].pos = -1
	if int(p) != n {
		h[p] = h[n]
		t.slots[h[p]].pos = p
	}
	t.heap = h[:n]
	if int(p) < n {
		t.fix(int(p))
	}
	if cap(t.heap) >= minCompact && n < cap(t.heap)/4 {
		t.heap = append(make([]int32, 0, 2*n), t.heap...)
	}
}

func (t *holdTimes) less(a, b int) bool {
	return t.slots[t.heap[a]].at < t.slots[t.heap[b]].at
}

func (t *holdTimes) swap(a, b int) {
	h := t.heap
	h[a], h[b] = h[b], h[a]
	t.slots[h[a]].pos = int32(a)
	t.slots[h[b]].pos = int32(b)
}

func (t *holdTimes) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *holdTimes) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(t.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(t.heap) && t.less(r, l) {
			m = r
		}
		if !t.less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// fix restores the heap order around entry i after its deadline moved.
func (t *holdTimes) fix(i int) {
	t.up(i)
	t.down(i)
}

// each calls f with every slot in use; f must not change t.
func (t *holdTimes) each(f func(s *holdSlot)) {
	for i := range t.slots {
		if s := &t.slots[i]; s.rec != nil {
			f(s)
		}
	}
}

// maybeCompact renumbers the slots in use into a slice sized for them
// once they are under a quarter of it, so that a burst of holds does not
// keep its memory after the holds end.
func (t *holdTimes) maybeCompact() {
	if len(t.slots) < minCompact || t.live >= len(t.slots)/4 {
		return
	}
	slots := make([]holdSlot, 0, 2*t.live)
	heap := make([]int32, len(t.heap), 2*t.live)
	for key, head := range t.byKey {
		first := int32(-1)
		for i := head; i >= 0; i = t.slots[i].next {
			s := t.slots[i]
			s.next = first
			first = int32(len(slots))
			if s.pos >= 0 {
				heap[s.pos] = first
			}
			slots = append(slots, s)
		}
		t.byKey[key] = first
	}
	t.slots, t.heap, t.free = slots, heap, -1
}
