package adminhttp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

type fakeAudit struct {
	mu   sync.Mutex
	recs []adminapi.AuditRecord
}

func (f *fakeAudit) Audit(_ context.Context, r adminapi.AuditRecord, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs = append(f.recs, r)
	return nil
}

func (f *fakeAudit) AuditLog(AuditQuery) adminapi.AuditLog { return adminapi.AuditLog{} }

// TestAudited: a change answered here is recorded with its action,
// target, actor, source and outcome, and its handler still reads the
// whole body; a read, a redirected change and a relayed record are not;
// a namespace's secret never reaches a record.
func TestAudited(t *testing.T) {
	t.Parallel()
	fa := &fakeAudit{}
	h := &handler{Config: Config{Audit: fa, Token: "t", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	var bodies []string
	mux := http.NewServeMux()
	mux.HandleFunc("/namespaces", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, string(b))
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/locks/unlock", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere/locks/unlock", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("PUT /namespaces/{name}/quota", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unknown namespace\nmore", http.StatusNotFound)
	})
	mux.HandleFunc("/drain", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("/audit", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := h.audited(mux)
	do := func(method, path, body string) {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.RemoteAddr = "192.0.2.7:999"
		srv.ServeHTTP(httptest.NewRecorder(), r)
	}
	secretBody := `{"name":"orders","secret":"hunter2-secret"}`
	do(http.MethodPost, "/namespaces", secretBody)
	do(http.MethodGet, "/namespaces", "")
	do(http.MethodPost, "/locks/unlock", `{"namespace":"ns","key":"k"}`)
	do(http.MethodPut, "/namespaces/ghost/quota", `{"held":5,"rate":2}`)
	do(http.MethodPost, "/drain", "")
	do(http.MethodPost, "/audit", `{"action":"x"}`)
	if len(bodies) != 1 || bodies[0] != secretBody {
		t.Fatalf("the handler read %q, want the whole body", bodies)
	}
	want := []adminapi.AuditRecord{
		{Actor: "admin token", Source: "192.0.2.7:999", Action: "namespace_put", Namespace: "orders", Outcome: "ok"},
		{Actor: "admin token", Source: "192.0.2.7:999", Action: "quota_set", Namespace: "ghost", Target: "held=5 waiters=0 rate=2 burst=0", Outcome: "HTTP 404: unknown namespace"},
		{Actor: "admin token", Source: "192.0.2.7:999", Action: "drain", Outcome: "pending"},
	}
	fa.mu.Lock()
	defer fa.mu.Unlock()
	if len(fa.recs) != len(want) {
		t.Fatalf("recorded %+v, want %+v", fa.recs, want)
	}
	for i := range want {
		if fa.recs[i] != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, fa.recs[i], want[i])
		}
		if strings.Contains(fa.recs[i].Target+fa.recs[i].Namespace+fa.recs[i].Outcome, "hunter2") {
			t.Errorf("record %d holds the secret", i)
		}
	}
}

// TestAuditAction: each change's route has its action name.
func TestAuditAction(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/cluster/unlock", "force_unlock"},
		{"DELETE", "/namespaces?name=x", "namespace_delete"},
		{"DELETE", "/drain", "undrain"},
		{"POST", "/members", "member_add"},
		{"DELETE", "/members/4", "member_remove"},
		{"POST", "/members/groups/3", "group_members_change"},
		{"PUT", "/registry/clusters/c1", "registry_cluster_put"},
		{"DELETE", "/registry/moves/ns", "registry_move_delete"},
		{"POST", "/moves/ns/abort", "move_abort"},
		{"POST", "/backup", "backup"},
		{"PATCH", "/odd", "request PATCH /odd"},
	} {
		got, ok := auditAction(httptest.NewRequest(c.method, c.path, nil))
		if !ok || got != c.want {
			t.Errorf("%s %s: %q %v, want %q", c.method, c.path, got, ok, c.want)
		}
	}
	if q, err := parseAuditQuery(httptest.NewRequest("GET", "/audit?since=x", nil)); err == nil {
		t.Fatalf("since=x parsed as %+v", q)
	}
	if q, err := parseAuditQuery(httptest.NewRequest("GET", "/audit?limit=10001", nil)); err == nil {
		t.Fatalf("limit=10001 parsed as %+v", q)
	}
}
