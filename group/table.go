package group

import (
	"hash/maphash"
	"iter"
)

// tableChunkBits sets how many entries one chunk of a lockTable holds
// (1<<tableChunkBits, 64 bytes each).
const tableChunkBits = 7

const (
	tableChunk    = 1 << tableChunkBits
	tableMinIndex = 16 // the smallest index a table with a key has
	// tableShrinkMin is the index size below which a table never
	// shrinks its index: a shard whose keys come and go in bursts would
	// otherwise allocate an index on every burst (BenchmarkApply).
	tableShrinkMin = 1024
)

// lockTable is one shard's lock records by full key, kept for memory: a
// held key costs one 64-byte entry (its key's string header, its record
// by value) in a chunk of entries and 8 bytes of index
// at a load of at most three quarters, and no heap object of its own
// besides its key's bytes and a record's rare out-of-line part (recExt).
// A map of key to *lockRec cost a 48-byte record object and 50–60 bytes
// of map per key, and a million objects more for the collector to mark.
//
// The index is open addressing with linear probing: each slot is 0
// (empty) or the low 32 bits of the key's hash above the entry's number
// plus one. The low bits of the hash are the slot's home, so the index
// grows and deletes (backward shift, no tombstones) without reading a
// key, and a probe reads an entry only when 32 bits of hash match.
//
// Chunks never move, so a record's address is stable while its key is
// held: view's callers and apply change records in place through it. A
// freed entry is reused, so an address is no record's identity; its
// generation is (see set).
//
// The zero lockTable is empty and ready. A lockTable is guarded by its
// shard's lock.
type lockTable struct {
	chunks []*[tableChunk]tableEntry
	free   []uint32 // freed entry numbers, reused first
	n      int      // keys held
	index  []uint64
	seed   maphash.Seed
	// gen is the last generation handed out; it never goes back, not
	// even over a reset, so that a generation names one record for the
	// life of the process.
	gen uint64
}

// tableEntry is one key's record in a lockTable; a record of
// generation 0 marks a free entry.
type tableEntry struct {
	key string
	rec lockRec
}

// hash returns key's hash in t's seed, the seed made on first use.
// Only set makes it (under the shard's write lock): readers hash only
// when the table holds a key, so the seed is made by then.
func (t *lockTable) hash(key string) uint64 {
	if t.seed == (maphash.Seed{}) {
		t.seed = maphash.MakeSeed()
	}
	return maphash.String(t.seed, key)
}

func (t *lockTable) entry(e uint32) *tableEntry {
	return &t.chunks[e>>tableChunkBits][e&(tableChunk-1)]
}

// find returns key's index slot and entry, or the empty slot where it
// would go and nil. t.index is not empty.
func (t *lockTable) find(key string, h uint64) (int, *tableEntry) {
	mask := len(t.index) - 1
	tag := uint32(h)
	for i := int(tag) & mask; ; i = (i + 1) & mask {
		v := t.index[i]
		if v == 0 {
			return i, nil
		}
		if uint32(v>>32) == tag {
			if e := t.entry(uint32(v) - 1); e.key == key {
				return i, e
			}
		}
	}
}

// get returns key's record, nil when the key is not held. The record
// stays at its address until key is deleted.
func (t *lockTable) get(key string) *lockRec {
	if t.n == 0 {
		return nil
	}
	if _, e := t.find(key, t.hash(key)); e != nil {
		return &e.rec
	}
	return nil
}

// set stores a copy of *l as key's record, a new record whether or not
// key had one, and returns its address. The copy shares l's out-of-line
// part; the caller drops l. The copy's generation (lockRec.gen) is one
// never handed out before: a record made anew or replaced under the same
// key has another, so that the master's deadline slots count only while
// the record they were set on is the key's (holdSlot.rec).
func (t *lockTable) set(key string, l *lockRec) *lockRec {
	if (t.n+1)*4 > len(t.index)*3 {
		t.resize(max(tableMinIndex, 2*len(t.index)))
	}
	h := t.hash(key)
	i, e := t.find(key, h)
	t.gen++
	if e != nil {
		e.rec = *l
		e.rec.gen = t.gen
		return &e.rec
	}
	var num uint32
	if k := len(t.free); k > 0 {
		num = t.free[k-1]
		t.free = t.free[:k-1]
	} else {
		num = uint32(len(t.chunks)) << tableChunkBits
		t.chunks = append(t.chunks, new([tableChunk]tableEntry))
		for j := tableChunk - 1; j > 0; j-- {
			t.free = append(t.free, num+uint32(j))
		}
	}
	e = t.entry(num)
	*e = tableEntry{key: key, rec: *l}
	e.rec.gen = t.gen
	t.index[i] = uint64(uint32(h))<<32 | uint64(num+1)
	t.n++
	return &e.rec
}

// delete drops key's record; its address may then hold another key's.
func (t *lockTable) delete(key string) {
	if t.n == 0 {
		return
	}
	i, e := t.find(key, t.hash(key))
	if e == nil {
		return
	}
	num := uint32(t.index[i]) - 1
	*e = tableEntry{} // lets go of the key's bytes and the record's extension
	t.free = append(t.free, num)
	t.n--
	t.unslot(i)
	// A shard keeps its chunks and a small index for its next keys:
	// taking and freeing keys allocates nothing.
	if len(t.index) > tableShrinkMin && t.n*8 < len(t.index) {
		t.resize(len(t.index) / 2)
	}
}

// unslot empties index slot i, shifting back the slots after it that
// probed past it so that every key stays reachable from its home.
func (t *lockTable) unslot(i int) {
	mask := len(t.index) - 1
	for j := (i + 1) & mask; t.index[j] != 0; j = (j + 1) & mask {
		home := int(uint32(t.index[j]>>32)) & mask
		// The slot at j stays unless its home is cyclically outside
		// (i, j]: then it moves into the hole at i.
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.index[i] = t.index[j]
			i = j
		}
	}
	t.index[i] = 0
}

// resize rebuilds the index at size slots (a power of two, more than
// t.n*4/3), from the hash bits it keeps.
func (t *lockTable) resize(size int) {
	old := t.index
	t.index = make([]uint64, size)
	mask := size - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := int(uint32(v>>32)) & mask
		for t.index[i] != 0 {
			i = (i + 1) & mask
		}
		t.index[i] = v
	}
}

// grow makes room for n keys in all without further resizing.
func (t *lockTable) grow(n int) {
	size := tableMinIndex
	for size*3 < n*4 {
		size *= 2
	}
	if size > len(t.index) {
		t.resize(size)
	}
}

// len returns the number of keys held.
func (t *lockTable) len() int { return t.n }

// reset empties the table and gives its memory back; generations go on
// from where they were.
func (t *lockTable) reset() { *t = lockTable{seed: t.seed, gen: t.gen} }

// all yields every key and its record, in no order; the yield must not
// change t.
func (t *lockTable) all() iter.Seq2[string, *lockRec] {
	return func(yield func(string, *lockRec) bool) {
		for _, e := range t.entries() {
			if !yield(e.key, &e.rec) {
				return
			}
		}
	}
}

// entries yields every entry in use, in no order; the yield must not
// change t.
func (t *lockTable) entries() iter.Seq2[int, *tableEntry] {
	return func(yield func(int, *tableEntry) bool) {
		k := 0
		for _, c := range t.chunks {
			for j := range c {
				if e := &c[j]; e.rec.gen != 0 {
					if !yield(k, e) {
						return
					}
					k++
				}
			}
		}
	}
}
