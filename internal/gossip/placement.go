package gossip

import (
	"fmt"
	"slices"

	"github.com/paxlock/paxlock/client/wire"
)

// PreferredMaster returns the node that should master group: the
// (group mod N)-th of the N live node ids, which must be sorted ascending
// and distinct (LiveIDs builds such a list). So 15 groups over 3 nodes are
// 5 per node, and every node that computes it from the same member list
// agrees. It returns 0 when the list is empty.
//
// This is a placement preference, not an authority: a node that is
// preferred still becomes master only through a Paxos election, and a
// node that masters a group it is not preferred for hands it over
// explicitly once the preferred node is healthy.
func PreferredMaster(group int, liveSortedIDs []uint32) uint32 {
	n := len(liveSortedIDs)
	if n == 0 {
		return 0
	}
	i := group % n
	if i < 0 {
		i += n
	}
	return liveSortedIDs[i]
}

// StickyPreferredMaster is PreferredMaster for a cluster whose configured
// nodes are allSortedIDs, some of them down: a group keeps its preferred
// node among all configured nodes while that node is live, and only the
// groups of nodes that are not live are spread over the live ones
// (PreferredMaster over liveSortedIDs). Feeding PreferredMaster the live
// list alone would move most groups whenever one node comes or goes (g mod
// 3 and g mod 2 disagree on most g); this moves only the absent node's.
// Both lists must be sorted ascending and distinct. It returns 0 when no
// node is live.
func StickyPreferredMaster(group int, allSortedIDs, liveSortedIDs []uint32) uint32 {
	if p := PreferredMaster(group, allSortedIDs); p != 0 {
		if _, ok := slices.BinarySearch(liveSortedIDs, p); ok {
			return p
		}
	}
	return PreferredMaster(group, liveSortedIDs)
}

// PreferredMasters returns PreferredMaster for groups 0 to groups-1.
func PreferredMasters(groups int, liveSortedIDs []uint32) []uint32 {
	out := make([]uint32, max(groups, 0))
	for g := range out {
		out[g] = PreferredMaster(g, liveSortedIDs)
	}
	return out
}

// LiveIDs returns the sorted, distinct node ids of the members that are
// live (StateAlive or StateSuspect), not leaving, and whose metadata
// decoded: the list PreferredMaster takes.
func LiveIDs(members []Member) []uint32 {
	var ids []uint32
	for _, mb := range members {
		if mb.State.Live() && !mb.Leaving && mb.MetaErr == nil && mb.ID != 0 {
			ids = append(ids, mb.ID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// AliveIDs returns the sorted, distinct ids of the nodes v marks alive.
func AliveIDs(v *wire.View) []uint32 {
	if v == nil {
		return nil
	}
	var ids []uint32
	for _, n := range v.Nodes {
		if n.Alive && n.ID != 0 {
			ids = append(ids, n.ID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// MasterCounts returns how many groups each node masters in v. Groups
// without a master are not counted.
func MasterCounts(v *wire.View) map[uint32]int {
	c := map[uint32]int{}
	if v == nil {
		return c
	}
	for _, g := range v.Groups {
		if g.Master != 0 {
			c[g.Master]++
		}
	}
	return c
}

// CheckBalanced returns nil if every group of v has a master, every master
// is a node v marks alive, and each alive node masters either
// floor(G/N) or ceil(G/N) of the G groups; otherwise an error saying what
// is off. It does not require each group to sit on its PreferredMaster
// (see Misplaced).
func CheckBalanced(v *wire.View) error {
	if v == nil || len(v.Groups) == 0 {
		return fmt.Errorf("gossip: view has no groups")
	}
	alive := AliveIDs(v)
	if len(alive) == 0 {
		return fmt.Errorf("gossip: view has no alive node")
	}
	for g, gv := range v.Groups {
		if gv.Master == 0 {
			return fmt.Errorf("gossip: group %d has no master", g)
		}
		if _, ok := slices.BinarySearch(alive, gv.Master); !ok {
			return fmt.Errorf("gossip: group %d is mastered by node %d, which is not alive", g, gv.Master)
		}
	}
	counts := MasterCounts(v)
	lo := len(v.Groups) / len(alive)
	hi := lo
	if len(v.Groups)%len(alive) != 0 {
		hi++
	}
	for _, id := range alive {
		if c := counts[id]; c < lo || c > hi {
			return fmt.Errorf("gossip: node %d masters %d groups, want %d to %d (%v)", id, c, lo, hi, counts)
		}
	}
	return nil
}

// Balanced reports whether CheckBalanced(v) is nil.
func Balanced(v *wire.View) bool { return CheckBalanced(v) == nil }

// Misplaced returns the groups of v whose master is not their
// PreferredMaster among v's alive nodes (groups without a master
// included), in ascending order.
func Misplaced(v *wire.View) []int {
	if v == nil {
		return nil
	}
	alive := AliveIDs(v)
	var out []int
	for g, gv := range v.Groups {
		if gv.Master != PreferredMaster(g, alive) || gv.Master == 0 {
			out = append(out, g)
		}
	}
	return out
}
