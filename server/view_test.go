package server

import (
	"testing"

	"github.com/paxlock/paxlock/paxos"
)

// TestViewVersionRisesWithEveryChange: the view's version rises with every
// change of the view, an alive flag or a master named within a known
// ballot included (the sum of ballot rounds alone stayed put, and clients
// ignored such a view), and stays when nothing changed.
func TestViewVersionRisesWithEveryChange(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{NodeID: 1, Nodes: []NodeAddr{{ID: 1, Client: "a"}, {ID: 2, Client: "b"}, {ID: 3, Client: "c"}}},
		subs: map[*conn]struct{}{}, masters: make([]paxos.SoftState, 3)}
	book := addrBook{}
	for _, n := range s.cfg.Nodes {
		book[paxos.NodeID(n.ID)] = n
	}
	s.book.Store(&book)
	s.rebuildView()
	last := s.View().Version
	step := func(what string, change bool, f func()) {
		t.Helper()
		f()
		v := s.View().Version
		if change && v <= last {
			t.Fatalf("%s: version %d after %d, want higher", what, v, last)
		}
		if !change && v != last {
			t.Fatalf("%s: version %d after %d, want unchanged", what, v, last)
		}
		last = v
	}
	b := paxos.Ballot{Round: 4, Node: 2}
	step("a group's ballot becomes known", true, func() { s.onMaster(1, paxos.SoftState{Ballot: b}) })
	step("its master is named in that ballot", true, func() { s.onMaster(1, paxos.SoftState{Ballot: b, Master: 2}) })
	step("node 3 is not alive", true, func() { s.setAlive(map[uint32]bool{1: true, 2: true}) })
	step("the same flags again", false, func() { s.setAlive(map[uint32]bool{1: true, 2: true}) })
	step("node 3 is alive again", true, func() { s.setAlive(map[uint32]bool{1: true, 2: true, 3: true}) })
	step("a rebuild without change", false, func() { s.rebuildView() })
}
