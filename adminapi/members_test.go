package adminapi

import (
	"encoding/json"
	"testing"
)

// TestMemberStateText: every state's name parses back to it, and a
// member's state travels in JSON by name ("" when not set).
func TestMemberStateText(t *testing.T) {
	for st := MemberJoining; st <= MemberRemoved; st++ {
		if p, err := ParseMemberState(st.String()); err != nil || p != st {
			t.Errorf("state %d: %v %v", st, p, err)
		}
	}
	if _, err := ParseMemberState("gone"); err == nil {
		t.Error("an unknown state parsed")
	}
	for _, m := range []Member{{ID: 4, State: MemberLeaving, Peer: "h:1"}, {ID: 5, Peer: "h:2"}} {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Member
		if err := json.Unmarshal(b, &back); err != nil || back != m {
			t.Errorf("%s: %+v %v, want %+v", b, back, err, m)
		}
	}
}
