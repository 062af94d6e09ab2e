package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// TestAudit: audit asks GET /audit with the admin token and its
// selection, pages with since= until a short page, and prints the
// records as JSON or a table; help audit describes it.
func TestAudit(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		since, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		out := adminapi.AuditLog{Node: 3, Last: since, Records: []adminapi.AuditRecord{}}
		for s := since + 1; s <= 3 && len(out.Records) < limit; s++ {
			out.Records = append(out.Records, adminapi.AuditRecord{Seq: s, Time: "2026-01-02T03:04:05Z", Node: 1, Actor: "admin token",
				Source: "10.0.0.9:4000", Action: "force_unlock", Namespace: "orders", Target: "jobs/" + strconv.FormatUint(s, 10), Outcome: "ok"})
			out.Last = s
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	t.Setenv(adminapi.TokenEnv, "tok3n")
	flags := []string{"-admin", strings.TrimPrefix(srv.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}

	code, out, errOut := runCtl(t, "", append(flags, "audit", "-since", "1", "-action", "force_unlock", "-in", "orders", "-o", "json")...)
	if code != 0 {
		t.Fatalf("audit: exit %d, %s", code, errOut)
	}
	var got auditOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Node != 3 || len(got.Records) != 2 || got.Records[0].Seq != 2 || got.Records[1].Target != "jobs/3" {
		t.Fatalf("audit -o json printed %q (%v)", out, err)
	}
	code, out, errOut = runCtl(t, "", append(flags, "audit", "-limit", "2")...)
	if code != 0 || !strings.Contains(out, "SEQ") || !strings.Contains(out, "jobs/2") || strings.Contains(out, "jobs/3") || !strings.Contains(out, "10.0.0.9:4000") {
		t.Fatalf("audit table: exit %d, %q, %s", code, out, errOut)
	}
	mu.Lock()
	want := "/audit?action=force_unlock&limit=1000&namespace=orders&since=1 Bearer tok3n"
	if len(asked) < 1 || asked[0] != want {
		t.Fatalf("asked %q, want %q first", asked, want)
	}
	mu.Unlock()
	if code, _, errOut := runCtl(t, "", append(flags, "audit", "extra")...); code != 2 {
		t.Fatalf("audit with an argument: exit %d, %s", code, errOut)
	}
	if code, out, _ := runCtl(t, "", "help", "audit"); code != 0 || !strings.Contains(out, "-since") || !strings.Contains(out, "audit log") {
		t.Fatalf("help audit: exit %d, %q", code, out)
	}
}
