package adminhttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminAuthPublicRead: with admin_public_read, /status, /metrics,
// GET /namespaces, /cluster and /events are served without the token, and
// nothing else is; the console's page and files are served to anyone
// (they hold no data); without a token configured, everything is open.
func TestAdminAuthPublicRead(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	cases := []struct {
		method, path string
		public       bool // without the token, with public read
	}{
		{http.MethodGet, "/healthz", true},
		{http.MethodGet, "/readyz", true},
		{http.MethodGet, "/status", true},
		{http.MethodGet, "/metrics", true},
		{http.MethodGet, "/namespaces", true},
		{http.MethodPost, "/namespaces", false},
		{http.MethodDelete, "/namespaces", false},
		{http.MethodGet, "/debug/pprof/", false},
		{http.MethodPost, "/debug/partition", false},
		{http.MethodGet, "/debug/partition", false},
		{http.MethodGet, "/cluster", true},
		{http.MethodGet, "/events", true},
		{http.MethodGet, "/", true},
		{http.MethodGet, "/console", true},
		{http.MethodGet, "/console/console.js", true},
		{http.MethodPost, "/", false},
		{http.MethodGet, "/console/other.js", false},
		{http.MethodGet, "/console/locks.js", true},
		{http.MethodGet, "/console/elections.js", true},
		{http.MethodGet, "/clients", false},
		{http.MethodGet, "/cluster/locks/ns/k", false},
		{http.MethodPost, "/cluster/unlock", false},
	}
	for _, publicRead := range []bool{false, true} {
		h := RequireToken("tok", publicRead, ok)
		for _, c := range cases {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
			want := http.StatusUnauthorized
			page := c.method == http.MethodGet && (c.path == "/" || strings.HasPrefix(c.path, "/console/console.") || c.path == "/console" || c.path == "/console/locks.js" || c.path == "/console/elections.js")
			if c.path == "/healthz" || c.path == "/readyz" || page || (publicRead && c.public) {
				want = http.StatusOK
			}
			if rec.Code != want {
				t.Errorf("public read %v: %s %s without token: %d, want %d", publicRead, c.method, c.path, rec.Code, want)
			}
			rec = httptest.NewRecorder()
			req := httptest.NewRequest(c.method, c.path, nil)
			req.Header.Set("Authorization", "Bearer tok")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Errorf("%s %s with token: %d", c.method, c.path, rec.Code)
			}
		}
	}
	rec := httptest.NewRecorder()
	RequireToken("", false, ok).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/namespaces", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("no token configured: %d, want the handler's 200", rec.Code)
	}
}
