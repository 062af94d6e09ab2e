package group

import (
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/systable"
)

// TestMemberListOps applies the member-list commands (the configured
// nodes installed once, a join, a removal, a refused reuse of a removed
// id, a refused other incarnation, a malformed record), reloads the list
// from what they wrote (as a restart or a snapshot does) and checks that
// both replicas agree and that the observer heard of each change.
func TestMemberListOps(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	sm := NewStateMachine(1)
	changes := 0
	sm.members.SetObserver(func() { changes++ })
	seed := []Member{
		{ID: 1, State: MemberActive, Peer: "p1", Client: "c1"},
		{ID: 2, State: MemberActive, Peer: "p2", Client: "c2", Admin: "a2"},
	}
	var initData []byte
	for _, m := range seed {
		initData = systable.AppendMember(initData, m)
	}
	put := func(m Member) []byte {
		return appendCommand(nil, &command{op: opMemberPut, data: systable.AppendMember(nil, m)})
	}
	cmds := [][]byte{
		appendCommand(nil, &command{op: opMemberInit, data: initData}),
		appendCommand(nil, &command{op: opMemberInit, data: systable.AppendMember(nil, Member{ID: 9, State: MemberActive, Peer: "p9"})}), // once only
		put(Member{ID: 3, State: MemberJoining, Incarnation: 77, Peer: "p3", Client: "c3", ClientTLS: "t3", Gossip: "g3"}),
		put(Member{ID: 3, State: MemberActive, Peer: "p3", Client: "c3", ClientTLS: "t3", Gossip: "g3"}), // incarnation kept
		put(Member{ID: 1, State: MemberRemoved}),
		put(Member{ID: 1, State: MemberJoining, Peer: "p1"}),                 // removed: refused
		put(Member{ID: 3, State: MemberActive, Incarnation: 78, Peer: "p3"}), // other data dir: refused
		appendCommand(nil, &command{op: opMemberPut, data: []byte{1, 2, 3}}),
	}
	results := make([]any, len(cmds))
	sm.Apply(1, cmds, kv, results)
	want := []systable.MemberOutcome{systable.MemberApplied, systable.MemberApplied, systable.MemberApplied, systable.MemberApplied, systable.MemberApplied,
		systable.MemberIDRemoved, systable.MemberOtherIncarnation, systable.MemberBadRecord}
	for i, r := range results {
		if o, _ := r.(systable.MemberOutcome); o != want[i] {
			t.Errorf("command %d: %+v, want status %s", i, r, want[i])
		}
	}
	if changes != 4 {
		t.Errorf("observer told of %d changes, want 4", changes)
	}
	wantList := []Member{
		{ID: 1, State: MemberRemoved},
		{ID: 2, State: MemberActive, Peer: "p2", Client: "c2", Admin: "a2"},
		{ID: 3, State: MemberActive, Incarnation: 77, Peer: "p3", Client: "c3", ClientTLS: "t3", Gossip: "g3"},
	}
	svc := &Service{}
	svc.groups = []*Group{{svc: svc, sm: sm}}
	got, init := svc.Members()
	if !init || !reflect.DeepEqual(got, wantList) {
		t.Fatalf("list %+v (initialised %v), want %+v", got, init, wantList)
	}

	loaded := NewStateMachine(1)
	loadedChanges := 0
	loaded.members.SetObserver(func() { loadedChanges++ })
	if err := loaded.Load(kv, 1); err != nil {
		t.Fatalf("Load: %v", err)
	}
	svc2 := &Service{}
	svc2.groups = []*Group{{svc: svc2, sm: loaded}}
	got, init = svc2.Members()
	if !init || !reflect.DeepEqual(got, wantList) || loadedChanges != 1 {
		t.Fatalf("loaded list %+v (initialised %v, %d changes told), want %+v", got, init, loadedChanges, wantList)
	}
	if m, ok := svc2.Member(1); !ok || m.Live() {
		t.Errorf("node 1: %+v %v, want a removed record", m, ok)
	}
}
