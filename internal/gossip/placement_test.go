package gossip

import (
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

func TestPreferredMasterSpreadsEvenly(t *testing.T) {
	for _, ids := range [][]uint32{{1, 2, 3}, {1, 2, 3, 4, 5}, {4, 9, 17}} {
		counts := map[uint32]int{}
		for g := range wire.DefaultGroups {
			counts[PreferredMaster(g, ids)]++
		}
		want := wire.DefaultGroups / len(ids)
		for _, id := range ids {
			if counts[id] != want {
				t.Fatalf("ids %v: node %d prefers %d groups, want %d (%v)", ids, id, counts[id], want, counts)
			}
		}
	}
	if got := PreferredMaster(4, []uint32{1, 2, 3}); got != 2 {
		t.Fatalf("group 4 of 3 nodes: %d, want 2", got)
	}
	if got := PreferredMaster(-1, []uint32{1, 2, 3}); got != 3 {
		t.Fatalf("negative group: %d", got)
	}
	if got := PreferredMaster(3, nil); got != 0 {
		t.Fatalf("no nodes: %d", got)
	}
	pm := PreferredMasters(4, []uint32{5, 6})
	if len(pm) != 4 || pm[0] != 5 || pm[1] != 6 || pm[2] != 5 || pm[3] != 6 {
		t.Fatalf("PreferredMasters: %v", pm)
	}
}

func TestLiveIDs(t *testing.T) {
	ms := []Member{
		{NodeMeta: NodeMeta{ID: 3}, State: StateAlive},
		{NodeMeta: NodeMeta{ID: 1}, State: StateSuspect},
		{NodeMeta: NodeMeta{ID: 2}, State: StateDead},
		{NodeMeta: NodeMeta{ID: 4}, State: StateLeft},
		{NodeMeta: NodeMeta{ID: 5, Leaving: true}, State: StateAlive},
		{NodeMeta: NodeMeta{ID: 3}, State: StateAlive},
		{State: StateAlive, MetaErr: ErrBadMeta},
	}
	got := LiveIDs(ms)
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("LiveIDs = %v, want [1 3]", got)
	}
}

func viewOf(masters []uint32, alive ...uint32) *wire.View {
	v := &wire.View{Version: 1}
	for _, m := range masters {
		v.Groups = append(v.Groups, wire.GroupView{Master: m, Epoch: 1})
	}
	for _, id := range alive {
		v.Nodes = append(v.Nodes, wire.NodeView{ID: id, Alive: true})
	}
	return v
}

func TestBalanced(t *testing.T) {
	ids := []uint32{1, 2, 3}
	v := viewOf(PreferredMasters(15, ids), ids...)
	if err := CheckBalanced(v); err != nil {
		t.Fatal(err)
	}
	if m := Misplaced(v); len(m) != 0 {
		t.Fatalf("misplaced %v", m)
	}
	// Evenly spread but not on the preferred nodes: balanced, misplaced.
	rot := PreferredMasters(15, []uint32{2, 3, 1})
	v = viewOf(rot, ids...)
	if !Balanced(v) || len(Misplaced(v)) != 15 {
		t.Fatalf("rotated: balanced=%v misplaced=%v", Balanced(v), Misplaced(v))
	}
	// One node masters 6.
	m := PreferredMasters(15, ids)
	m[1] = 1
	if Balanced(viewOf(m, ids...)) {
		t.Fatal("6/4/5 counted as balanced")
	}
	// 16 groups over 3: 6/5/5 is balanced.
	if err := CheckBalanced(viewOf(PreferredMasters(16, ids), ids...)); err != nil {
		t.Fatal(err)
	}
	// A group without master, or mastered by a dead node.
	m = PreferredMasters(15, ids)
	m[0] = 0
	if Balanced(viewOf(m, ids...)) {
		t.Fatal("masterless group counted as balanced")
	}
	v = viewOf(PreferredMasters(15, ids), ids...)
	v.Nodes[2].Alive = false
	if Balanced(v) {
		t.Fatal("dead master counted as balanced")
	}
	if Balanced(nil) || Balanced(&wire.View{}) {
		t.Fatal("empty view counted as balanced")
	}
}

func TestStickyPreferredMaster(t *testing.T) {
	all := []uint32{1, 2, 3}
	live := []uint32{1, 3}
	masters := make([]uint32, wire.DefaultGroups)
	for g := range masters {
		masters[g] = StickyPreferredMaster(g, all, live)
		if p := PreferredMaster(g, all); p != 2 && masters[g] != p {
			t.Fatalf("group %d moved from live node %d to %d", g, p, masters[g])
		}
		if masters[g] == 2 {
			t.Fatalf("group %d placed on the absent node", g)
		}
	}
	if err := CheckBalanced(viewOf(masters, live...)); err != nil {
		t.Fatal(err)
	}
	// With everyone live it is PreferredMaster.
	for g := range wire.DefaultGroups {
		if StickyPreferredMaster(g, all, all) != PreferredMaster(g, all) {
			t.Fatalf("group %d differs with all nodes live", g)
		}
	}
	if StickyPreferredMaster(0, all, nil) != 0 {
		t.Fatal("no live node must give 0")
	}
}
