package peers

// Routing for the paxlock-api adapter: the nodes' answers carry hints of
// where a key's group's master is (Paxlock-Node, Paxlock-Master,
// Paxlock-Group; docs/api.md, Routing), and a call for a key goes
// straight to the node the latest hint names as its group's master, so
// the node called needs no relay hop. A hint that is stale or missing
// costs one relay, never a wrong answer.

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/paxlock/paxlock/client/wire"
)

// The routing hints' headers (apiserver.NodeHeader and its siblings).
const (
	hintNode   = "Paxlock-Node"
	hintMaster = "Paxlock-Master"
	hintGroup  = "Paxlock-Group"
)

// apiRouter maps a key to the index of the node to call.
type apiRouter struct {
	ns string
	// byID is node id → index in the locker's nodes, learnt from each
	// node's first answer (ping), before any session exists.
	byID map[uint32]int
	// table is the latest hinted master of every group.
	table atomic.Pointer[routeTable]
}

// routeTable is the hinted master node id of every group (0: unknown).
type routeTable struct{ masters []atomic.Uint32 }

// identify records that the node at index i answered h.
func (r *apiRouter) identify(i int, h http.Header) {
	if id, err := strconv.ParseUint(h.Get(hintNode), 10, 32); err == nil && id != 0 {
		r.byID[uint32(id)] = i
	}
}

// learn takes the hints of an answer.
func (r *apiRouter) learn(h http.Header) {
	master, err := strconv.ParseUint(h.Get(hintMaster), 10, 32)
	if err != nil || master == 0 {
		return
	}
	gs, ns, ok := strings.Cut(h.Get(hintGroup), "/")
	g, err1 := strconv.Atoi(gs)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n <= 0 || n > wire.MaxViewGroups || g < 0 || g >= n {
		return
	}
	t := r.table.Load()
	if t == nil || len(t.masters) != n {
		nt := &routeTable{masters: make([]atomic.Uint32, n)}
		if !r.table.CompareAndSwap(t, nt) {
			nt = r.table.Load()
			if len(nt.masters) != n {
				return
			}
		}
		t = nt
	}
	t.masters[g].Store(uint32(master))
}

// pick is the index of the node to call for key: its group's hinted
// master when that is a node of the locker's, else fallback.
func (r *apiRouter) pick(key string, fallback int) int {
	if r == nil {
		return fallback
	}
	t := r.table.Load()
	if t == nil {
		return fallback
	}
	id := t.masters[wire.GroupOf(wire.KeyHash(r.ns, key), len(t.masters))].Load()
	if i, ok := r.byID[id]; ok {
		return i
	}
	return fallback
}
