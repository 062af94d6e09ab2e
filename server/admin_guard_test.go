package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/adminguard"
)

// TestAdminRefusesCrossSite: with no admin token, a form or text/plain
// POST to /locks/unlock (what any web page can send through the
// operator's browser) is refused 415 and the lock stays held; a page's
// cross-site fetch is refused 403; GET /backup under a foreign Host (DNS
// rebinding) is refused 403 while /healthz still answers; a JSON POST
// still works.
func TestAdminRefusesCrossSite(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, tc)
	m := c.Mutex("held", client.TTL(time.Hour), client.AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	base := "http://" + tc.cfgs[0].AdminAddr
	send := func(method, path, host string, hdr map[string]string, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	unlock := `{"namespace":"ns","key":"held"}`
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "text/plain; charset=utf-8", "multipart/form-data; boundary=x", ""} {
		if code := send(http.MethodPost, "/locks/unlock", "", map[string]string{"Content-Type": ct}, unlock); code != http.StatusUnsupportedMediaType {
			t.Errorf("force unlock with Content-Type %q: HTTP %d, want 415", ct, code)
		}
	}
	if !m.Held() {
		t.Fatal("the lock was released by a request that is not JSON")
	}
	cross := []map[string]string{
		{"Content-Type": "application/json", "Origin": "http://evil.example"},
		{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
		{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"},
	}
	for _, h := range cross {
		if code := send(http.MethodPost, "/locks/unlock", "", h, unlock); code != http.StatusForbidden {
			t.Errorf("force unlock with %v: HTTP %d, want 403", h, code)
		}
	}
	if !m.Held() {
		t.Fatal("the lock was released by a cross-site request")
	}
	if code := send(http.MethodGet, "/backup", "rebound.example:"+portOf(tc.cfgs[0].AdminAddr), nil, ""); code != http.StatusForbidden {
		t.Errorf("GET /backup under a foreign Host: HTTP %d, want 403", code)
	}
	if code := send(http.MethodGet, "/healthz", "rebound.example", nil, ""); code != http.StatusOK {
		t.Errorf("GET /healthz under a foreign Host: HTTP %d, want 200", code)
	}
	if code := send(http.MethodGet, "/status", "localhost", nil, ""); code != http.StatusOK {
		t.Errorf("GET /status as localhost: HTTP %d, want 200", code)
	}
	if code := send(http.MethodPost, "/locks/unlock", "", map[string]string{"Content-Type": "application/json; charset=utf-8", "Origin": base, "Sec-Fetch-Site": "same-origin"}, unlock); code != http.StatusOK {
		t.Fatalf("force unlock as JSON from the endpoint's own origin: HTTP %d, want 200", code)
	}
}

// portOf returns addr's port.
func portOf(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

// TestAdminCallRedirectKeepsToken: adminCall does not send the admin
// token where a redirect to another host points (it refuses the
// redirect), and follows one to the same host with it.
func TestAdminCallRedirectKeepsToken(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	got.Store("")
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()
	// The sink by another host name: localhost, not 127.0.0.1.
	elsewhere := strings.Replace(sink.URL, "127.0.0.1", "localhost", 1)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to := elsewhere
		if r.URL.Query().Get("same") == "1" {
			to = sink.URL
		}
		http.Redirect(w, r, to+"/members", http.StatusTemporaryRedirect)
	}))
	defer redir.Close()
	hc, err := adminHTTP(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err = adminCall(ctx, hc, http.MethodPost, redir.URL+"/members", "secret-token", []byte("{}"))
	if err == nil {
		t.Error("a redirect to another host was followed")
	}
	if a := got.Load().(string); a != "" {
		t.Fatalf("the host a redirect named got Authorization %q", a)
	}
	code, _, err := adminCall(ctx, hc, http.MethodPost, redir.URL+"/members?same=1", "secret-token", []byte("{}"))
	if err != nil || code != http.StatusOK {
		t.Fatalf("redirect to the same host: %d, %v", code, err)
	}
	if a := got.Load().(string); a != "Bearer secret-token" {
		t.Fatalf("the same host got Authorization %q, want the token", a)
	}
}

// TestAdminHosts: the admin endpoint answers under its listen address's
// host, its nodes' advertised hosts and admin_allowed_hosts, and refuses
// another name.
func TestAdminHosts(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{AdminAddr: "admin.internal:7301", AdminAllowedHosts: []string{"paxlock-svc"},
		Nodes: []NodeAddr{{ID: 1, Peer: "node1.cluster.local:7201", Client: "10.0.0.1:7101"}, {ID: 2, Admin: "node2.cluster.local:7301"}}}}
	mux := http.NewServeMux()
	mux.HandleFunc("/backup", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	h := adminguard.Wrap(s.adminHosts(), mux)
	for host, want := range map[string]int{
		"admin.internal:7301": 200, "node1.cluster.local": 200, "NODE2.cluster.local:7301": 200,
		"paxlock-svc:7301": 200, "10.9.9.9:7301": 200, "rebound.example:7301": 403, "cluster.local": 403,
	} {
		req := httptest.NewRequest(http.MethodGet, "/backup", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("GET /backup with Host %q: HTTP %d, want %d", host, rec.Code, want)
		}
	}
}
