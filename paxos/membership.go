package paxos

import (
	"fmt"
	"slices"
)

// MemberChange adds one member to a group or removes one: exactly one of
// Add and Remove is set. Replacing a node is two changes, a removal and an
// addition under a new id, in either order.
type MemberChange struct {
	Add    NodeID
	Remove NodeID
}

// String formats the change as +id or -id.
func (ch MemberChange) String() string {
	if ch.Add != 0 {
		return fmt.Sprintf("+%d", ch.Add)
	}
	return fmt.Sprintf("-%d", ch.Remove)
}

// Membership is a group's member set at one point of its log: the voters
// whose majorities choose values and grant leases, and every id that was a
// member once and was removed, which may never be a member again (an
// acceptor that comes back under an old id with an empty disk would have
// forgotten its promises). The zero Membership means "not recorded": a
// Core then starts from Config.Peers.
type Membership struct {
	Members []NodeID
	Removed []NodeID
}

// Contains reports whether id is a member.
func (m Membership) Contains(id NodeID) bool { return slices.Contains(m.Members, id) }

// Quorum returns the size of a majority of the members.
func (m Membership) Quorum() int { return len(m.Members)/2 + 1 }

// IsZero reports whether m records no members.
func (m Membership) IsZero() bool { return len(m.Members) == 0 }

// Clone returns a copy of m that shares nothing with it.
func (m Membership) Clone() Membership {
	return Membership{Members: slices.Clone(m.Members), Removed: slices.Clone(m.Removed)}
}

// Check reports why ch cannot apply to m (an error matching ErrBadChange),
// or nil.
func (m Membership) Check(ch MemberChange) error {
	switch {
	case (ch.Add == 0) == (ch.Remove == 0):
		return fmt.Errorf("%w: a change adds exactly one node or removes exactly one", ErrBadChange)
	case ch.Add != 0 && m.Contains(ch.Add):
		return fmt.Errorf("%w: node %d is already a member", ErrBadChange, ch.Add)
	case ch.Add != 0 && slices.Contains(m.Removed, ch.Add):
		return fmt.Errorf("%w: node %d was removed; an id is never reused, give the node a new one", ErrBadChange, ch.Add)
	case ch.Remove != 0 && !m.Contains(ch.Remove):
		return fmt.Errorf("%w: node %d is not a member", ErrBadChange, ch.Remove)
	case ch.Remove != 0 && len(m.Members) == 1:
		return fmt.Errorf("%w: node %d is the last member", ErrBadChange, ch.Remove)
	}
	return nil
}

// Apply returns m with ch applied; m is not modified. A change that does
// not apply (Check) leaves the set as it is: every replica applies the
// same chosen changes in the same order, so every replica skips the same
// ones.
func (m Membership) Apply(ch MemberChange) Membership {
	if m.Check(ch) != nil {
		return m.Clone()
	}
	out := m.Clone()
	if ch.Add != 0 {
		out.Members = append(out.Members, ch.Add)
		return out
	}
	out.Members = slices.DeleteFunc(out.Members, func(id NodeID) bool { return id == ch.Remove })
	out.Removed = append(out.Removed, ch.Remove)
	return out
}

// String formats the set as [1 2 3] or [1 2 3 -4].
func (m Membership) String() string {
	s := fmt.Sprint(m.Members)
	if len(m.Removed) > 0 {
		s = s[:len(s)-1]
		for _, id := range m.Removed {
			s += fmt.Sprintf(" -%d", id)
		}
		s += "]"
	}
	return s
}

// MemberStatus is a replica's view of its group's membership.
type MemberStatus struct {
	// Current is the set in force for the instance after Committed.
	Current Membership
	// Pending is the change this replica, as master, queued or has in
	// flight, nil if none; PendingAt is its instance once proposed.
	Pending   *MemberChange
	PendingAt uint64
}
