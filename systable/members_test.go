package systable

import (
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

func TestMemberRecordRoundTrip(t *testing.T) {
	t.Parallel()
	m := Member{ID: 1<<32 - 1, State: adminapi.MemberLeaving, Incarnation: 1 << 63, Peer: "h:1", Client: "h:2", ClientTLS: "h:3", Gossip: "h:4", Admin: "h:5"}
	got, err := ParseMember(AppendMember(nil, m))
	if err != nil || got != m {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	b := AppendMember(nil, m)
	for i := range b {
		if _, err := ParseMember(b[:i]); err == nil {
			t.Fatalf("a record cut at %d parsed", i)
		}
	}
	for _, bad := range []Member{{ID: 0, State: adminapi.MemberActive, Peer: "p"}, {ID: 1, State: 9, Peer: "p"}, {ID: 1, State: adminapi.MemberJoining}} {
		if _, err := ParseMember(AppendMember(nil, bad)); err == nil {
			t.Errorf("%+v parsed", bad)
		}
	}
	for st := adminapi.MemberJoining; st <= adminapi.MemberRemoved; st++ {
		if p, err := adminapi.ParseMemberState(st.String()); err != nil || p != st {
			t.Errorf("state %d: %v %v", st, p, err)
		}
	}
}

// mapWriter is a keyspace in a map.
type mapWriter map[string][]byte

func (w mapWriter) Set(k, v []byte) { w[string(k)] = append([]byte(nil), v...) }
func (w mapWriter) Delete(k []byte) { delete(w, string(k)) }

// TestMembersTable: the table's ops give their own outcomes, write only
// the table's keys, and a load of what they wrote gives the same list.
func TestMembersTable(t *testing.T) {
	var tab Members
	changes := 0
	tab.SetObserver(func() { changes++ })
	w := mapWriter{}
	seed := AppendMember(nil, Member{ID: 1, State: adminapi.MemberActive, Peer: "p1"})
	steps := []struct {
		got, want MemberOutcome
	}{
		{tab.ApplyInit(seed, w), MemberApplied},
		{tab.ApplyInit(AppendMember(nil, Member{ID: 9, State: adminapi.MemberActive, Peer: "p9"}), w), MemberApplied}, // once only
		{tab.ApplyPut(AppendMember(nil, Member{ID: 2, State: adminapi.MemberJoining, Incarnation: 5, Peer: "p2"}), w), MemberApplied},
		{tab.ApplyPut(AppendMember(nil, Member{ID: 2, State: adminapi.MemberActive, Incarnation: 6, Peer: "p2"}), w), MemberOtherIncarnation},
		{tab.ApplyPut(AppendMember(nil, Member{ID: 1, State: adminapi.MemberRemoved}), w), MemberApplied},
		{tab.ApplyPut(AppendMember(nil, Member{ID: 1, State: adminapi.MemberActive, Peer: "p1"}), w), MemberIDRemoved},
		{tab.ApplyPut([]byte{1, 2}, w), MemberBadRecord},
	}
	for i, s := range steps {
		if s.got != s.want {
			t.Errorf("step %d: %s, want %s", i, s.got, s.want)
		}
	}
	if changes != 3 || len(w) != 3 {
		t.Fatalf("%d changes told, %d keys written; want 3 and 3", changes, len(w))
	}
	want, _ := tab.List()
	var loaded Members
	end := loaded.BeginLoad()
	for k, v := range w {
		if !IsMemberKey([]byte(k)) {
			t.Fatalf("key %q is not the table's", k)
		}
		if err := loaded.LoadPair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	end()
	if got, init := loaded.List(); !init || !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v (init %v), want %+v", got, init, want)
	}
	if MemberIDRemoved.Err() != ErrMemberRemoved || MemberOtherIncarnation.Err() != ErrIncarnation || MemberApplied.Err() != nil || MemberBadRecord.Err() == nil {
		t.Fatal("Err does not map the outcomes")
	}
}
