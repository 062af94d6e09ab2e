package systable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/paxos"
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

// ErrBadMember means a member record does not decode or is not one the
// list can hold.
var ErrBadMember = errors.New("systable: bad member record")

// MemberOutcome is the outcome of a member-list change as every replica of
// group 0 computes it. It never leaves the node: the proposer turns it
// into an error (Err).
type MemberOutcome uint8

// Member-list change outcomes.
const (
	// MemberApplied: the change was applied, or was a no-op (the list
	// installed already).
	MemberApplied MemberOutcome = iota + 1
	// MemberBadRecord: the command's member record does not decode.
	MemberBadRecord
	// MemberIDRemoved: the id was removed from the cluster, and ids are
	// never reused (ErrMemberRemoved).
	MemberIDRemoved
	// MemberOtherIncarnation: the list holds the id with another data
	// directory (ErrIncarnation).
	MemberOtherIncarnation
)

// String returns applied, bad record, id removed, other incarnation, or
// the number of another value.
func (o MemberOutcome) String() string {
	switch o {
	case MemberApplied:
		return "applied"
	case MemberBadRecord:
		return "bad record"
	case MemberIDRemoved:
		return "id removed"
	case MemberOtherIncarnation:
		return "other incarnation"
	}
	return fmt.Sprintf("MemberOutcome(%d)", uint8(o))
}

// Err is the proposer's error for o: nil for MemberApplied,
// ErrMemberRemoved, ErrIncarnation, or one naming o.
func (o MemberOutcome) Err() error {
	switch o {
	case MemberApplied:
		return nil
	case MemberIDRemoved:
		return ErrMemberRemoved
	case MemberOtherIncarnation:
		return ErrIncarnation
	}
	return fmt.Errorf("group: member change: %s", o)
}

// IsMemberKey reports whether k is one of the member list's keys (a member
// record or the list's initialised mark).
func IsMemberKey(k []byte) bool {
	return (len(k) > 0 && k[0] == memberPrefix) || string(k) == string(memberInitKey)
}

func memberKey(id uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{memberPrefix}, id)
}

// AppendMember appends m's record to dst; a list of records is their
// concatenation.
func AppendMember(dst []byte, m Member) []byte {
	dst = append(dst, memberRecV1, byte(m.State))
	dst = binary.AppendUvarint(dst, uint64(m.ID))
	dst = binary.AppendUvarint(dst, m.Incarnation)
	for _, a := range []string{m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin} {
		dst = binary.AppendUvarint(dst, uint64(len(a)))
		dst = append(dst, a...)
	}
	return dst
}

// ValidMember reports whether m can be recorded: an id above 0, a known
// state, addresses of at most 1 KiB and, unless removed, a peer address.
func ValidMember(m Member) bool {
	if m.ID == 0 || m.State < adminapi.MemberJoining || m.State > adminapi.MemberRemoved {
		return false
	}
	for _, a := range []string{m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin} {
		if len(a) > maxMemberAddr {
			return false
		}
	}
	return m.State == adminapi.MemberRemoved || m.Peer != ""
}

func decodeMember(r *codec.Reader) (Member, error) {
	if r.Byte() != memberRecV1 || r.Failed() {
		return Member{}, ErrBadMember
	}
	var m Member
	m.State = adminapi.MemberState(r.Byte())
	id := r.Uvarint()
	m.Incarnation = r.Uvarint()
	var addrs [5]string
	for i := range addrs {
		n := r.Uvarint()
		if n > maxMemberAddr {
			return Member{}, ErrBadMember
		}
		addrs[i] = string(r.Bytes(n))
	}
	if r.Failed() || id > 1<<32-1 {
		return Member{}, ErrBadMember
	}
	m.ID = uint32(id)
	m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin = addrs[0], addrs[1], addrs[2], addrs[3], addrs[4]
	if !ValidMember(m) {
		return Member{}, ErrBadMember
	}
	return m, nil
}

// ParseMember decodes one member record, all of b.
func ParseMember(b []byte) (Member, error) {
	r := codec.NewReader(b)
	m, err := decodeMember(&r)
	if err == nil && r.Len() != 0 {
		err = ErrBadMember
	}
	return m, err
}

// Members is the cluster's member list as one replica of group 0 holds
// it. The zero value is an empty list, never initialised.
type Members struct {
	mu   sync.RWMutex
	byID map[uint32]Member // node id -> record
	init bool              // the configured nodes were installed
	gen  uint64            // counts changes of the list
	obs  func()            // told of every change of the list (set before the group starts)
}

// SetObserver makes f told of every change of the list, outside the
// table's lock. Call it before the first apply.
func (t *Members) SetObserver(f func()) {
	t.mu.Lock()
	t.obs = f
	t.mu.Unlock()
}

// ApplyPut applies a put of the member record rec. A put of a removed id,
// or of a known incarnation with another one, is refused with an outcome
// every replica computes alike; an incarnation of 0 keeps the recorded
// one. Either op marks the list initialised.
func (t *Members) ApplyPut(rec []byte, w paxos.Writer) MemberOutcome {
	m, err := ParseMember(rec)
	if err != nil {
		return MemberBadRecord
	}
	return t.apply(w, func() ([]Member, MemberOutcome, bool) {
		if old, ok := t.byID[m.ID]; ok {
			switch {
			case old.State == adminapi.MemberRemoved && m.State != adminapi.MemberRemoved:
				return nil, MemberIDRemoved, false
			case old.Incarnation != 0 && m.Incarnation != 0 && old.Incarnation != m.Incarnation:
				return nil, MemberOtherIncarnation, false
			case m.Incarnation == 0:
				m.Incarnation = old.Incarnation
			}
		}
		return []Member{m}, MemberApplied, true
	})
}

// ApplyInit installs the list of records recs (AppendMember's
// concatenation) into a list never initialised, so a node an operator
// removed does not come back from a configuration file; into one
// initialised already it is a no-op.
func (t *Members) ApplyInit(recs []byte, w paxos.Writer) MemberOutcome {
	return t.apply(w, func() ([]Member, MemberOutcome, bool) {
		if t.init {
			return nil, MemberApplied, false
		}
		var ms []Member
		r := codec.NewReader(recs)
		for r.Len() > 0 {
			m, err := decodeMember(&r)
			if err != nil {
				return nil, MemberBadRecord, false
			}
			ms = append(ms, m)
		}
		return ms, MemberApplied, true
	})
}

// apply decides a change with decide under the table's lock and, when it
// says to write, writes the records it returns and marks the list
// initialised; the observer is told after the lock is released.
func (t *Members) apply(w paxos.Writer, decide func() ([]Member, MemberOutcome, bool)) MemberOutcome {
	t.mu.Lock()
	recs, o, changed := decide()
	if changed {
		t.write(recs, w)
	}
	obs := t.obs
	t.mu.Unlock()
	if changed && obs != nil {
		obs()
	}
	return o
}

// write records recs and marks the list initialised; t.mu is held.
func (t *Members) write(recs []Member, w paxos.Writer) {
	if !t.init {
		w.Set(memberInitKey, []byte{1})
	}
	t.init = true
	if t.byID == nil {
		t.byID = make(map[uint32]Member)
	}
	for _, m := range recs {
		t.byID[m.ID] = m
		w.Set(memberKey(m.ID), AppendMember(nil, m))
	}
	t.gen++
}

// BeginLoad empties the list for a load from a checkpoint and keeps it
// locked until end is called, which tells the observer of the change.
func (t *Members) BeginLoad() (end func()) {
	t.mu.Lock()
	t.byID = make(map[uint32]Member)
	t.init = false
	t.gen++
	return func() {
		obs := t.obs
		t.mu.Unlock()
		if obs != nil {
			obs()
		}
	}
}

// LoadPair reads one of the list's pairs (IsMemberKey) during a load.
func (t *Members) LoadPair(k, v []byte) error {
	if string(k) == string(memberInitKey) {
		t.init = true
		return nil
	}
	m, err := ParseMember(v)
	if err != nil || len(k) != 5 || binary.BigEndian.Uint32(k[1:]) != m.ID {
		return fmt.Errorf("group: member record %x: %w", k, ErrBadMember)
	}
	t.byID[m.ID] = m
	return nil
}

// List returns the list, removed nodes included, sorted by id, and
// whether it was ever initialised.
func (t *Members) List() ([]Member, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Member, 0, len(t.byID))
	for _, m := range t.byID {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, t.init
}

// Get returns node id's record, if the list has one.
func (t *Members) Get(id uint32) (Member, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	m, ok := t.byID[id]
	return m, ok
}

// Generation counts the changes applied to the list (a record put, the
// list installed, a load).
func (t *Members) Generation() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gen
}

// Initialised reports whether the list was ever written.
func (t *Members) Initialised() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.init
}

// Len returns the number of records in the list.
func (t *Members) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}
