package adminapi

import (
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// MemberState is a node's state in the cluster's member list.
type MemberState uint8

// Member states. A node is added as MemberJoining, becomes MemberActive
// once every Paxos group has it as an acceptor; a removal passes through
// MemberLeaving (Paxos groups being changed) to MemberRemoved, which is
// final.
const (
	MemberJoining MemberState = 1
	MemberActive  MemberState = 2
	MemberLeaving MemberState = 3
	MemberRemoved MemberState = 4
)

// String names the state as the admin API and paxlockctl show it.
func (s MemberState) String() string {
	switch s {
	case MemberJoining:
		return "joining"
	case MemberActive:
		return "member"
	case MemberLeaving:
		return "leaving"
	case MemberRemoved:
		return "removed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseMemberState is String's inverse.
func ParseMemberState(s string) (MemberState, error) {
	for st := MemberJoining; st <= MemberRemoved; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown member state %q", wire.ErrInvalid, s)
}

// MarshalText implements encoding.TextMarshaler; the zero state (not
// set) is "".
func (s MemberState) MarshalText() ([]byte, error) {
	if s == 0 {
		return nil, nil
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; "" is the zero
// state (not set).
func (s *MemberState) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*s = 0
		return nil
	}
	v, err := ParseMemberState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Member is one node of the cluster's member list.
type Member struct {
	ID    uint32      `json:"id"`
	State MemberState `json:"state"`
	// Incarnation identifies the node's data directory (0: not known
	// yet, e.g. a node of the static configuration before it reported
	// it).
	Incarnation uint64 `json:"incarnation,omitempty"`
	Peer        string `json:"peer"`
	Client      string `json:"client"`
	ClientTLS   string `json:"client_tls_addr,omitempty"`
	Gossip      string `json:"gossip,omitempty"`
	Admin       string `json:"admin,omitempty"`
}

// Live reports whether the node is part of the cluster (joining, a member
// or leaving), as opposed to removed.
func (m Member) Live() bool { return m.State != MemberRemoved }

// GroupMembers is one group's acceptor set as this node sees it.
type GroupMembers struct {
	Group   int      `json:"group"`
	Master  uint32   `json:"master"`
	Members []uint32 `json:"members"`
	Removed []uint32 `json:"removed,omitempty"`
	// Pending is the change in progress on this node as the group's
	// master ("+4", "-1"), "" if none.
	Pending string `json:"pending,omitempty"`
}

// MembersReport is what GET /members answers, and what a change answers
// when it is done.
type MembersReport struct {
	// Cluster is the cluster's name (a joining node checks it).
	Cluster string         `json:"cluster"`
	Members []Member       `json:"members"`
	Groups  []GroupMembers `json:"groups"`
}

// MemberChangeError is what a change that could not complete answers:
// which groups have the change and which not. Running the change again
// finishes it.
type MemberChangeError struct {
	Error   string `json:"error"`
	Node    uint32 `json:"node"`
	Op      string `json:"op"`
	Done    []int  `json:"done"`
	Pending []int  `json:"pending"`
	// Next says how the change will finish.
	Next string `json:"next,omitempty"`
}

// GroupChange is the body of POST /members/groups/{g}: one acceptor
// added to or removed from lock group g, on its master (a step of a
// member change, between nodes).
type GroupChange struct {
	Add    uint32 `json:"add,omitempty"`
	Remove uint32 `json:"remove,omitempty"`
}
