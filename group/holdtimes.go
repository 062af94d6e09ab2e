package group

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/paxlock/paxlock/client/wire"
)

// holdSlot is the master's clock for one hold, kept by its worker (see
// holdTimes), never in the replicated record. It holds no pointer, so
// the collector never scans the slots, however many holds there are
// (TestHoldSlotIsPointerFree): the key is an extent of holdTimes.keys,
// the record a stamp and the connection a number.
type holdSlot struct {
	owner wire.Owner
	token uint64
	// at is the hold's deadline in nanoseconds on the worker's monotonic
	// clock (see worker.mono).
	at int64
	// start is when, on the same clock, the hold was granted (or this
	// node became master, whichever was later): the master reads the
	// hold's age from it, for metrics, and counts its hold limit from it.
	start int64
	// key is where the hold's full key is in holdTimes.keys: its length
	// (2 bytes, little-endian), then its bytes.
	key uint32
	// gen is the stamp (lockRec.gen) of the record the hold was in when
	// its deadline was set. A record that is replaced (a move in, a
	// checkpoint loaded) or that went and was made anew holds other
	// holds, even under the same name, and has another stamp, so a slot
	// counts only while the key's record still has gen. 0 marks a free
	// slot.
	gen uint32
	// conn is whom to tell when the hold is lost: the number in
	// holdTimes.conns of the connection its grant or last renewal came
	// over, -1 for nobody.
	conn int32
	// pos is the slot's index in holdTimes.heap, -1 once its deadline
	// came up (an Expire is being decided) and until it is set again.
	pos int32
	// next is the next slot of the same key hash, or of the free list;
	// -1 ends either.
	next int32
	// bound is the hold's maximum hold time in milliseconds, raised to
	// its TTL (see holdBound): its deadline never passes start plus
	// bound (limit); 0 for none.
	bound uint32
}

// limit returns the hold's hold limit on the worker's clock, 0 for none.
func (s *holdSlot) limit() int64 {
	if s.bound == 0 {
		return 0
	}
	return s.start + int64(s.bound)*int64(time.Millisecond)
}

// holdTimes is a worker's deadline and start of every hold it set one for:
// master-only soft state. Each hold is one slot of one slice; the slots
// of a key are chained from byKey, by the key's hash (a chain may hold
// keys whose hashes collide, told apart by their bytes), and the expiry
// heap is of slot numbers ordered by deadline, each slot knowing its
// place in it, so that a renewal moves its hold's deadline in place and a
// release takes it out: the heap holds exactly the holds whose deadline
// is pending, never stale entries.
//
// Nothing here that grows with the holds holds a pointer: the slots, the
// heap, byKey (uint32 to int32) and keys (each slot's key bytes, appended
// and compacted once mostly dead) are all skipped by the collector's
// scan. What does hold pointers, conns, has one entry per connection
// with holds.
type holdTimes struct {
	slots []holdSlot
	free  int32 // head of the free slots' chain, -1 when none
	live  int   // slots in use
	byKey map[uint32]int32
	heap  []int32
	// keys holds the slots' key bytes; dead counts those of freed slots.
	keys []byte
	dead int
	// conns[i] is the connection of the slots whose conn is i (nil:
	// free, listed in freeConns); a sinkRef has its number while a slot
	// names it (sinkRef.id, sinkRef.holds).
	conns     []*sinkRef
	freeConns []int32
	seed      maphash.Seed
	// mask is and-ed into every key hash: all ones but in tests, which
	// narrow it to make chains of colliding keys.
	mask uint32
	// keyLimit bounds len(keys), so that an offset fits a slot's uint32:
	// math.MaxUint32 but in tests.
	keyLimit int
}

// A slot's key length is 2 bytes: every full key fits.
var _ [math.MaxUint16 - (wire.MaxNamespaceLen + 1 + wire.MaxKeyLen)]struct{}

// minCompact is the slot count below which holdTimes never compacts.
const minCompact = 4096

// minKeyCompact is the size of holdTimes.keys below which it is never
// compacted.
const minKeyCompact = 1 << 16

func newHoldTimes() holdTimes {
	return holdTimes{free: -1, byKey: make(map[uint32]int32), seed: maphash.MakeSeed(), mask: math.MaxUint32, keyLimit: math.MaxUint32}
}

// reset forgets every hold and gives their memory back.
func (t *holdTimes) reset() {
	for _, r := range t.conns {
		if r != nil {
			r.id, r.holds = -1, 0
		}
	}
	mask, limit := t.mask, t.keyLimit
	*t = newHoldTimes()
	t.mask, t.keyLimit = mask, limit
}

// hash returns key's hash in byKey: 32 bits, half the map's bytes of 64.
// Among a million held keys about 120 pairs share a hash (n²/2³³), each
// pair a chain of two keys, and the seed is the worker's own, so no
// client can aim keys at one chain.
func (t *holdTimes) hash(key string) uint32 { return uint32(maphash.String(t.seed, key)) & t.mask }

// keyOf returns slot s's full key. The string shares keys' bytes, which
// are never written again (an append writes past them, a compaction into
// a new array), so it stays valid; a caller that keeps it long copies it,
// lest it keep a compacted-away array alive.
func (t *holdTimes) keyOf(s *holdSlot) string {
	n := t.keyLen(s)
	if n == 0 {
		return ""
	}
	return unsafe.String(&t.keys[s.key+2], n)
}

// keyLen returns the length of slot s's key.
func (t *holdTimes) keyLen(s *holdSlot) int {
	return int(binary.LittleEndian.Uint16(t.keys[s.key:]))
}

// isKey reports whether slot s is of key.
func (t *holdTimes) isKey(s *holdSlot, key string) bool {
	n := t.keyLen(s)
	return n == len(key) && string(t.keys[s.key+2:s.key+2+uint32(n)]) == key
}

// find returns the slot of the hold (key, o, token), -1 if none.
func (t *holdTimes) find(key string, o wire.Owner, token uint64) int32 {
	i, ok := t.byKey[t.hash(key)]
	if !ok {
		return -1
	}
	for ; i >= 0; i = t.slots[i].next {
		if s := &t.slots[i]; s.owner == o && s.token == token && t.isKey(s, key) {
			return i
		}
	}
	return -1
}

// get returns the slot of the hold (key, o, token) if it was set on the
// record stamped gen; nil otherwise. The pointer is valid until t
// changes.
func (t *holdTimes) get(key string, gen uint32, o wire.Owner, token uint64) *holdSlot {
	if i := t.find(key, o, token); i >= 0 && t.slots[i].gen == gen {
		return &t.slots[i]
	}
	return nil
}

// add makes a slot for the hold (key, o, token) of the record stamped gen
// (not 0), not yet in the heap and telling nobody, and returns its
// number.
func (t *holdTimes) add(key string, gen uint32, o wire.Owner, token uint64) int32 {
	i := t.free
	if i >= 0 {
		t.free = t.slots[i].next
	} else {
		i = int32(len(t.slots))
		t.slots = append(t.slots, holdSlot{})
	}
	if len(t.keys)+2+len(key) > t.keyLimit {
		t.compactKeys() // live keys are far fewer bytes: a million of the longest are 579 MB
	}
	off := uint32(len(t.keys))
	t.keys = binary.LittleEndian.AppendUint16(t.keys, uint16(len(key)))
	t.keys = append(t.keys, key...)
	h := t.hash(key)
	head, ok := t.byKey[h]
	if !ok {
		head = -1
	}
	t.slots[i] = holdSlot{gen: gen, key: off, owner: o, token: token, conn: -1, pos: -1, next: head}
	t.byKey[h] = i
	t.live++
	return i
}

// drop frees slot i, taking it out of the heap and its key's chain.
func (t *holdTimes) drop(i int32) {
	s := &t.slots[i]
	if s.pos >= 0 {
		t.unqueue(s.pos)
	}
	t.setConn(i, nil)
	h := t.hash(t.keyOf(s))
	if head := t.byKey[h]; head == i {
		if s.next >= 0 {
			t.byKey[h] = s.next
		} else {
			delete(t.byKey, h)
		}
	} else {
		p := head
		for t.slots[p].next != i {
			p = t.slots[p].next
		}
		t.slots[p].next = s.next
	}
	t.dead += 2 + t.keyLen(s)
	*s = holdSlot{conn: -1, pos: -1, next: t.free}
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
		i, ok := t.byKey[t.hash(key)]
		for ok && i >= 0 && !t.isKey(&t.slots[i], key) {
			i = t.slots[i].next
		}
		if !ok || i < 0 {
			return
		}
		t.drop(i)
	}
}

// setConn makes r (nil: nobody) whom slot i's hold tells when it is lost,
// numbering r while a slot names it.
func (t *holdTimes) setConn(i int32, r *sinkRef) {
	s := &t.slots[i]
	if old := s.conn; old >= 0 {
		if o := t.conns[old]; o == r {
			return
		} else if o.holds--; o.holds == 0 {
			o.id = -1
			t.conns[old] = nil
			t.freeConns = append(t.freeConns, old)
		}
		s.conn = -1
	}
	if r == nil {
		return
	}
	if r.holds == 0 {
		if n := len(t.freeConns); n > 0 {
			r.id = t.freeConns[n-1]
			t.freeConns = t.freeConns[:n-1]
			t.conns[r.id] = r
		} else {
			r.id = int32(len(t.conns))
			t.conns = append(t.conns, r)
		}
	}
	r.holds++
	s.conn = r.id
}

// connOf returns whom slot s's hold tells when it is lost (nil: nobody).
func (t *holdTimes) connOf(s *holdSlot) *sinkRef {
	if s.conn < 0 {
		return nil
	}
	return t.conns[s.conn]
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
	return expiry{at: s.at, key: strings.Clone(t.keyOf(s)), token: s.token, owner: s.owner, sink: t.connOf(s)}
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

// each calls f with every slot in use and its key (valid as keyOf's);
// f must not change t.
func (t *holdTimes) each(f func(s *holdSlot, key string)) {
	for i := range t.slots {
		if s := &t.slots[i]; s.gen != 0 {
			f(s, t.keyOf(s))
		}
	}
}

// maybeCompact renumbers the slots in use into a slice sized for them
// once they are under a quarter of it, so that a burst of holds does not
// keep its memory after the holds end; and compacts keys once most of
// it is dead.
func (t *holdTimes) maybeCompact() {
	if len(t.keys) >= minKeyCompact && t.dead > len(t.keys)/2 {
		t.compactKeys()
	}
	if len(t.slots) < minCompact || t.live >= len(t.slots)/4 {
		return
	}
	slots := make([]holdSlot, 0, 2*t.live)
	heap := make([]int32, len(t.heap), 2*t.live)
	for h, head := range t.byKey {
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
		t.byKey[h] = first
	}
	t.slots, t.heap, t.free = slots, heap, -1
}

// compactKeys copies the live slots' key bytes into a new keys array
// sized for them.
func (t *holdTimes) compactKeys() {
	keys := make([]byte, 0, 2*(len(t.keys)-t.dead))
	for i := range t.slots {
		if s := &t.slots[i]; s.gen != 0 {
			off := uint32(len(keys))
			keys = append(keys, t.keys[s.key:s.key+2+uint32(t.keyLen(s))]...)
			s.key = off
		}
	}
	t.keys, t.dead = keys, 0
}
