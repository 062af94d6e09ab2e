package group

import (
	"strings"

	"github.com/google/btree"
)

// A shard's namespace index: for every namespace with held keys in the
// shard, its full keys in byte order, so that a List of one namespace
// walks only that namespace's keys, from its cursor (the last key of the
// previous page) on, and stops after a page: its cost is the page, not
// the shard, and not the namespace's neighbours. Every replica keeps it
// (it changes with the table, in apply and Load), so a new master lists
// at once.
//
// The index holds the lock table's own key strings (the map's keys share
// their bytes), in a B-tree per namespace: github.com/google/btree, in
// the module graph already (through memberlist), whose generic tree
// stores the strings inline in each node's slice, 16 bytes a key plus
// the nodes' slack, and shares a shard's freed nodes. A sorted slice
// would cost as little at rest but move half a shard's namespace per
// insert, which apply cannot afford; a map per namespace gives no order.

// nsIndexDegree is the B-tree's degree: nodes hold 31 to 63 keys. Taken
// and freed in any order, keys cost about 28 bytes each in the index;
// loaded in order (indexed backwards, see Load), about 19
// (BenchmarkNSIndexMemory, 1M keys over 8 shards).
const nsIndexDegree = 32

// nsIndexFree bounds the freed nodes a shard keeps for reuse.
const nsIndexFree = 16

// nsTree is one namespace's keys in one shard; nsFreeList a shard's
// freed nodes of its trees.
type (
	nsTree     = btree.BTreeG[string]
	nsFreeList = btree.FreeListG[string]
)

func lessString(a, b string) bool { return a < b }

// index adds full key (held now, the table's own string) to the shard's
// namespace index; s.mu is held for writing.
func (s *shard) index(key string) {
	ns, _ := splitFull(key)
	t := s.nsKeys[ns]
	if t == nil {
		if s.nsKeys == nil {
			s.nsKeys = make(map[string]*nsTree)
		}
		if s.nsFree == nil {
			s.nsFree = btree.NewFreeListG[string](nsIndexFree)
		}
		t = btree.NewWithFreeListG(nsIndexDegree, lessString, s.nsFree)
		s.nsKeys[strings.Clone(ns)] = t // not a slice of the key, which it would keep
	}
	t.ReplaceOrInsert(key)
}

// unindex removes full key (free now) from the shard's namespace index,
// and a namespace's tree with its last key; s.mu is held for writing.
func (s *shard) unindex(key string) {
	ns, _ := splitFull(key)
	t := s.nsKeys[ns]
	if t == nil {
		return
	}
	t.Delete(key)
	if t.Len() == 0 {
		delete(s.nsKeys, ns)
	}
}

// nsKeysOf returns a copy of namespace ns's held full keys in the shard,
// in order; s.mu is held.
func (s *shard) nsKeysOf(ns string) []string {
	t := s.nsKeys[ns]
	if t == nil {
		return nil
	}
	out := make([]string, 0, t.Len())
	t.Ascend(func(k string) bool {
		out = append(out, k)
		return true
	})
	return out
}

// scanNS calls f with namespace ns's held full keys in the shard that
// start with from and sort after after (all from the first when after is
// ""), in order, until f returns false; it returns how many keys it
// visited (f's calls). s.mu is held (reading is enough).
func (s *shard) scanNS(ns, from, after string, f func(key string) bool) int {
	t := s.nsKeys[ns]
	if t == nil {
		return 0
	}
	pivot := from
	if after != "" && after > pivot {
		pivot = after
	}
	n := 0
	t.AscendGreaterOrEqual(pivot, func(k string) bool {
		if k == after {
			return true // the cursor itself was on the last page
		}
		if !strings.HasPrefix(k, from) {
			return false
		}
		n++
		return f(k)
	})
	return n
}
