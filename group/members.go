package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// The cluster's member list is replicated through the namespace group
// (lock group 0), like the namespace table: a record per node id ('c' +
// the id, 4 bytes big-endian) with the node's state in the cluster, its
// data directory's incarnation and its addresses. A removed node keeps its
// record (state MemberRemoved), so the set of removed ids is the set of
// such records and an id is never reused. The list says where nodes are
// and which ones placement may use; each Paxos group's own acceptor set is
// changed through that Paxos group's log (host.Replica.ChangeMembership).

const (
	memberPrefix = 'c'
	memberRecV1  = 1
	// maxMemberAddr bounds one address in a record.
	maxMemberAddr = 1024
)

var memberInitKey = []byte("mmeminit")

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
// never used again (an acceptor that comes back under an old id with an
// empty disk would have forgotten its promises).
var ErrMemberRemoved = errors.New("group: node id was removed from the cluster; ids are never reused, give the node a new id")

// ErrIncarnation means the cluster knows the node id with another data
// directory: the node lost (or was given a new) data directory under an
// id the cluster knows, and must join under a new id.
var ErrIncarnation = errors.New("group: the cluster knows this node id with another data directory; a node with an empty data directory must join under a new id")

func memberKey(id uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{memberPrefix}, id)
}

func appendMember(dst []byte, m Member) []byte {
	dst = append(dst, memberRecV1, byte(m.State))
	dst = binary.AppendUvarint(dst, uint64(m.ID))
	dst = binary.AppendUvarint(dst, m.Incarnation)
	for _, a := range []string{m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin} {
		dst = binary.AppendUvarint(dst, uint64(len(a)))
		dst = append(dst, a...)
	}
	return dst
}

// validMember reports whether m can be recorded.
func validMember(m Member) bool {
	if m.ID == 0 || m.State < MemberJoining || m.State > MemberRemoved {
		return false
	}
	for _, a := range []string{m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin} {
		if len(a) > maxMemberAddr {
			return false
		}
	}
	return m.State == MemberRemoved || m.Peer != ""
}

func decodeMember(r *reader) (Member, error) {
	if r.byte() != memberRecV1 || r.err {
		return Member{}, errBadCommand
	}
	var m Member
	m.State = MemberState(r.byte())
	id := r.uvarint()
	m.Incarnation = r.uvarint()
	var addrs [5]string
	for i := range addrs {
		n := r.uvarint()
		if n > maxMemberAddr {
			return Member{}, errBadCommand
		}
		addrs[i] = string(r.bytes(n))
	}
	if r.err || id > 1<<32-1 {
		return Member{}, errBadCommand
	}
	m.ID = uint32(id)
	m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin = addrs[0], addrs[1], addrs[2], addrs[3], addrs[4]
	if !validMember(m) {
		return Member{}, errBadCommand
	}
	return m, nil
}

func parseMember(b []byte) (Member, error) {
	r := reader{b: b}
	m, err := decodeMember(&r)
	if err == nil && len(r.b) != 0 {
		err = errBadCommand
	}
	return m, err
}

// memberOutcome is the outcome of a member-list change (opMemberPut,
// opMemberInit) as every replica of group 0 computes it. It is the
// applied command's result itself, and never leaves the node:
// proposeMember turns it into an error.
type memberOutcome uint8

// Member-list change outcomes.
const (
	// memberApplied: the change was applied, or was a no-op (the list
	// installed already).
	memberApplied memberOutcome = iota + 1
	// memberBadRecord: the command's member record does not decode.
	memberBadRecord
	// memberIDRemoved: the id was removed from the cluster, and ids are
	// never reused (ErrMemberRemoved).
	memberIDRemoved
	// memberOtherIncarnation: the list holds the id with another data
	// directory (ErrIncarnation).
	memberOtherIncarnation
)

// String returns applied, bad record, id removed, other incarnation, or
// the number of another value.
func (o memberOutcome) String() string {
	switch o {
	case memberApplied:
		return "applied"
	case memberBadRecord:
		return "bad record"
	case memberIDRemoved:
		return "id removed"
	case memberOtherIncarnation:
		return "other incarnation"
	}
	return fmt.Sprintf("memberOutcome(%d)", uint8(o))
}

// applyMember applies opMemberPut and opMemberInit (group 0). A put of a
// removed id, or of a known incarnation with another one, is refused with
// a status every replica computes alike. Either op marks the list
// initialised; Init installs the configured nodes only into a list never
// initialised, so a node an operator removed does not come back from a
// configuration file.
func (sm *StateMachine) applyMember(c *command, w paxos.Writer) memberOutcome {
	sm.memMu.Lock()
	out, changed := sm.applyMemberLocked(c, w)
	obs := sm.memObs
	sm.memMu.Unlock()
	if changed && obs != nil {
		obs()
	}
	return out
}

func (sm *StateMachine) applyMemberLocked(c *command, w paxos.Writer) (memberOutcome, bool) {
	wasInit := sm.memInit
	var recs []Member
	switch c.op {
	case opMemberInit:
		if wasInit {
			return memberApplied, false
		}
		r := reader{b: c.data}
		for len(r.b) > 0 {
			m, err := decodeMember(&r)
			if err != nil {
				return memberBadRecord, false
			}
			recs = append(recs, m)
		}
	case opMemberPut:
		m, err := parseMember(c.data)
		if err != nil {
			return memberBadRecord, false
		}
		if old, ok := sm.members[m.ID]; ok {
			switch {
			case old.State == MemberRemoved && m.State != MemberRemoved:
				return memberIDRemoved, false
			case old.Incarnation != 0 && m.Incarnation != 0 && old.Incarnation != m.Incarnation:
				return memberOtherIncarnation, false
			case m.Incarnation == 0:
				m.Incarnation = old.Incarnation
			}
		}
		recs = []Member{m}
	}
	sm.memInit = true
	if !wasInit {
		w.Set(memberInitKey, []byte{1})
	}
	for _, m := range recs {
		sm.members[m.ID] = m
		w.Set(memberKey(m.ID), appendMember(nil, m))
	}
	sm.memGen++
	return memberApplied, true
}

func (sm *StateMachine) loadMember(k, v []byte) error {
	m, err := parseMember(v)
	if err != nil || len(k) != 5 || binary.BigEndian.Uint32(k[1:]) != m.ID {
		return fmt.Errorf("group: member record %x: %w", k, errBadCommand)
	}
	sm.members[m.ID] = m
	return nil
}

// Members returns the cluster's member list as this replica of group 0
// knows it, removed nodes included, sorted by id, and whether the list was
// ever initialised (a new cluster's group 0 installs the configured nodes
// first; until then the list is empty).
func (s *Service) Members() ([]Member, bool) {
	sm := s.groups[NamespaceGroup].sm
	sm.memMu.RLock()
	defer sm.memMu.RUnlock()
	out := make([]Member, 0, len(sm.members))
	for _, m := range sm.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, sm.memInit
}

// Member returns node id's record, if the list has one.
func (s *Service) Member(id uint32) (Member, bool) {
	sm := s.groups[NamespaceGroup].sm
	sm.memMu.RLock()
	defer sm.memMu.RUnlock()
	m, ok := sm.members[id]
	return m, ok
}

// MembersGeneration counts the changes this replica applied to the member
// list (a record put, the list installed, a snapshot loaded).
func (s *Service) MembersGeneration() uint64 {
	sm := s.groups[NamespaceGroup].sm
	sm.memMu.RLock()
	defer sm.memMu.RUnlock()
	return sm.memGen
}

// PutMember records m in the member list. It must run on the master of
// group 0 (else ErrNotSystemMaster). Errors: ErrMemberRemoved when m's id
// was removed, ErrIncarnation when the list holds m's id with another
// incarnation.
func (s *Service) PutMember(ctx context.Context, m Member) error {
	if !validMember(m) {
		return fmt.Errorf("%w: member %d: an id above 0, a known state and a peer address are required", wire.ErrInvalid, m.ID)
	}
	return s.proposeMember(ctx, &command{op: opMemberPut, data: appendMember(nil, m)})
}

// InitMembers installs ms as the member list if the list was never
// written (a no-op otherwise). It must run on the master of group 0.
func (s *Service) InitMembers(ctx context.Context, ms []Member) error {
	var data []byte
	for _, m := range ms {
		if !validMember(m) {
			return fmt.Errorf("%w: member %d", wire.ErrInvalid, m.ID)
		}
		data = appendMember(data, m)
	}
	return s.proposeMember(ctx, &command{op: opMemberInit, data: data})
}

// MembersInitialised reports whether the member list was ever written.
func (s *Service) MembersInitialised() bool {
	sm := s.groups[NamespaceGroup].sm
	sm.memMu.RLock()
	defer sm.memMu.RUnlock()
	return sm.memInit
}

func (s *Service) proposeMember(ctx context.Context, c *command) error {
	res, err := s.proposeTable(ctx, c, "member change")
	if err != nil {
		return err
	}
	switch o, _ := res.(memberOutcome); o {
	case memberApplied:
		return nil
	case memberIDRemoved:
		return ErrMemberRemoved
	case memberOtherIncarnation:
		return ErrIncarnation
	}
	return fmt.Errorf("group: member change: %v", res)
}
