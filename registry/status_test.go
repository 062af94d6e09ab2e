package registry

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

// TestAdminEndpointToken: with an admin token the registry's status
// endpoint (whose report names the mover's fencing token) refuses a
// request without it or with a wrong one (401), serves it with it, and
// refuses a foreign Host (DNS rebinding) even with the token.
func TestAdminEndpointToken(t *testing.T) {
	t.Parallel()
	cfg := StandaloneConfig{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", AdminToken: "reg-token",
		Clusters: map[string][]string{"a": {"127.0.0.1:1"}}, Namespaces: map[string]string{"ns": "a"},
		Secrets: map[string]string{"ns": testSecret}, Logger: testutil.FailureLogger(t),
	}
	s, err := NewStandalone(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(ctx) }()
	base := "http://" + s.AdminAddr().String()
	get := func(path, host, bearer string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/status", "/metrics"} {
		for _, bad := range []string{"", "wrong"} {
			if code := get(path, "", bad); code != http.StatusUnauthorized {
				t.Errorf("GET %s with token %q: HTTP %d, want 401", path, bad, code)
			}
		}
		if code := get(path, "", "reg-token"); code != http.StatusOK {
			t.Errorf("GET %s with the token: HTTP %d, want 200", path, code)
		}
	}
	_, port, _ := strings.Cut(s.AdminAddr().String(), ":")
	if code := get("/status", "rebound.example:"+port, "reg-token"); code != http.StatusForbidden {
		t.Errorf("GET /status under a foreign Host: HTTP %d, want 403", code)
	}
}
