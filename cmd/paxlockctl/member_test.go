package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// TestMemberCommand: member list, add and remove send the admin API's
// requests (the token with them) and print its answer as a table or as
// JSON; bad arguments are usage errors.
func TestMemberCommand(t *testing.T) {
	t.Setenv(adminapi.TokenEnv, "tok")
	rep := adminapi.MembersReport{
		Members: []adminapi.Member{{ID: 1, State: adminapi.MemberActive, Peer: "h:1", Client: "h:2"}, {ID: 4, State: adminapi.MemberJoining, Peer: "h:7", Client: "h:8"}},
		Groups:  []adminapi.GroupMembers{{Group: 0, Master: 1, Members: []uint32{1, 4}, Pending: "+4"}},
	}
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b)+" "+r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(rep)
	}))
	defer srv.Close()
	admin := "-admin=" + strings.TrimPrefix(srv.URL, "http://")
	code, out, errOut := runCtl(t, "", admin, "member", "list")
	if code != 0 || !strings.Contains(out, "joining") || !strings.Contains(out, "1,4") || !strings.Contains(out, "+4") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCtl(t, "", admin, "-o", "json", "member", "add", "4", "peer=h:7", "client=h:8", "admin=h:9")
	var back adminapi.MembersReport
	if code != 0 || json.Unmarshal([]byte(out), &back) != nil || len(back.Members) != 2 || back.Members[1].State != adminapi.MemberJoining {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = runCtl(t, "", admin, "member", "remove", "1"); code != 0 {
		t.Fatalf("remove: %d %q", code, errOut)
	}
	want := []string{
		`GET /members  Bearer tok`,
		`POST /members {"id":4,"state":"","peer":"h:7","client":"h:8","admin":"h:9"} Bearer tok`,
		`DELETE /members/1  Bearer tok`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, args := range [][]string{{"member"}, {"member", "add", "4"}, {"member", "add", "4", "peer=x"}, {"member", "add", "x", "peer=a", "client=b"}, {"member", "remove", "0"}, {"member", "add", "4", "peer=a", "client=b", "port=c"}} {
		if code, _, _ := runCtl(t, "", append([]string{admin}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
}
