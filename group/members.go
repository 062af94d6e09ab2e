package group

import (
	"context"
	"fmt"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/systable"
)

// The cluster's member list is group 0's table systable.Members; this file
// is the Service's side of it: reading the list of this replica and
// proposing changes on the master of group 0.

// MemberState is a node's state in the cluster's member list
// (adminapi.MemberState: the admin API shows it).
type MemberState = adminapi.MemberState

// Member states (see adminapi.MemberState).
const (
	MemberJoining = adminapi.MemberJoining
	MemberActive  = adminapi.MemberActive
	MemberLeaving = adminapi.MemberLeaving
	MemberRemoved = adminapi.MemberRemoved
)

// Member is one node of the cluster's member list (adminapi.Member: the
// admin API shows it).
type Member = adminapi.Member

// ErrMemberRemoved means the node id was removed from the cluster; it is
// never used again (systable.ErrMemberRemoved).
var ErrMemberRemoved = systable.ErrMemberRemoved

// ErrIncarnation means the cluster knows the node id with another data
// directory (systable.ErrIncarnation).
var ErrIncarnation = systable.ErrIncarnation

// Members returns the cluster's member list as this replica of group 0
// knows it, removed nodes included, sorted by id, and whether the list was
// ever initialised (a new cluster's group 0 installs the configured nodes
// first; until then the list is empty).
func (s *Service) Members() ([]Member, bool) {
	return s.groups[NamespaceGroup].sm.members.List()
}

// Member returns node id's record, if the list has one.
func (s *Service) Member(id uint32) (Member, bool) {
	return s.groups[NamespaceGroup].sm.members.Get(id)
}

// MembersGeneration counts the changes this replica applied to the member
// list (a record put, the list installed, a snapshot loaded).
func (s *Service) MembersGeneration() uint64 {
	return s.groups[NamespaceGroup].sm.members.Generation()
}

// PutMember records m in the member list. It must run on the master of
// group 0 (else ErrNotSystemMaster). Errors: ErrMemberRemoved when m's id
// was removed, ErrIncarnation when the list holds m's id with another
// incarnation.
func (s *Service) PutMember(ctx context.Context, m Member) error {
	if !systable.ValidMember(m) {
		return fmt.Errorf("%w: member %d: an id above 0, a known state and a peer address are required", wire.ErrInvalid, m.ID)
	}
	return s.proposeMember(ctx, &command{op: opMemberPut, data: systable.AppendMember(nil, m)})
}

// InitMembers installs ms as the member list if the list was never
// written (a no-op otherwise). It must run on the master of group 0.
func (s *Service) InitMembers(ctx context.Context, ms []Member) error {
	var data []byte
	for _, m := range ms {
		if !systable.ValidMember(m) {
			return fmt.Errorf("%w: member %d", wire.ErrInvalid, m.ID)
		}
		data = systable.AppendMember(data, m)
	}
	return s.proposeMember(ctx, &command{op: opMemberInit, data: data})
}

// MembersInitialised reports whether the member list was ever written.
func (s *Service) MembersInitialised() bool {
	return s.groups[NamespaceGroup].sm.members.Initialised()
}

func (s *Service) proposeMember(ctx context.Context, c *command) error {
	res, err := s.proposeTable(ctx, c, "member change")
	if err != nil {
		return err
	}
	o, ok := res.(systable.MemberOutcome)
	if !ok {
		return fmt.Errorf("group: member change: %v", res)
	}
	return o.Err()
}
