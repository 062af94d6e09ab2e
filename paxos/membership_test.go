package paxos

import (
	"errors"
	"slices"
	"testing"
)

func TestMembershipCheckAndApply(t *testing.T) {
	m := Membership{Members: []NodeID{1, 2, 3}, Removed: []NodeID{7}}
	for _, tc := range []struct {
		ch   MemberChange
		ok   bool
		want []NodeID
	}{
		{MemberChange{Add: 4}, true, []NodeID{1, 2, 3, 4}},
		{MemberChange{Remove: 2}, true, []NodeID{1, 3}},
		{MemberChange{Add: 3}, false, nil},            // already a member
		{MemberChange{Add: 7}, false, nil},            // removed once: never again
		{MemberChange{Remove: 9}, false, nil},         // not a member
		{MemberChange{}, false, nil},                  // nothing
		{MemberChange{Add: 4, Remove: 1}, false, nil}, // two at once
	} {
		err := m.Check(tc.ch)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrBadChange) {
			t.Errorf("Check(%+v) = %v, want ok %v", tc.ch, err, tc.ok)
			continue
		}
		got := m.Apply(tc.ch)
		if !tc.ok {
			if !slices.Equal(got.Members, m.Members) || !slices.Equal(got.Removed, m.Removed) {
				t.Errorf("Apply(%+v) of a refused change gave %v", tc.ch, got)
			}
			continue
		}
		if !slices.Equal(got.Members, tc.want) {
			t.Errorf("Apply(%+v) = %v, want %v", tc.ch, got.Members, tc.want)
		}
		if tc.ch.Remove != 0 && !slices.Contains(got.Removed, tc.ch.Remove) {
			t.Errorf("Apply(%+v) does not record %d as removed: %v", tc.ch, tc.ch.Remove, got)
		}
	}
	if !slices.Equal(m.Members, []NodeID{1, 2, 3}) || !slices.Equal(m.Removed, []NodeID{7}) {
		t.Errorf("Apply modified its receiver: %v", m)
	}
	one := Membership{Members: []NodeID{5}}
	if err := one.Check(MemberChange{Remove: 5}); !errors.Is(err, ErrBadChange) {
		t.Errorf("removing the last member: %v", err)
	}
	// Any two consecutive sets' majorities share a node.
	for n := 1; n <= 7; n++ {
		if q := (Membership{Members: make([]NodeID, n)}).Quorum() + (Membership{Members: make([]NodeID, n+1)}).Quorum(); q <= n+1 {
			t.Errorf("majorities of %d and %d members need not intersect", n, n+1)
		}
	}
}

func TestMembershipEncoding(t *testing.T) {
	m := Membership{Members: []NodeID{2, 3, 300000}, Removed: []NodeID{1}}
	b := AppendMembership(nil, m)
	got, err := DecodeMembership(b)
	if err != nil || !slices.Equal(got.Members, m.Members) || !slices.Equal(got.Removed, m.Removed) {
		t.Fatalf("round trip of %v: %v, %v", m, got, err)
	}
	for name, bad := range map[string][]byte{
		"empty":           nil,
		"unknown version": append([]byte{9}, b[1:]...),
		"truncated":       b[:len(b)-1],
		"trailing":        append(slices.Clone(b), 0),
		"no members":      AppendMembership(nil, Membership{Removed: []NodeID{1}}),
		"member id 0":     {membersVersion, 1, 0, 0},
	} {
		if _, err := DecodeMembership(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
