package adminguard

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWrap: what the guard lets through and what it refuses, with the
// status of each refusal.
func TestWrap(t *testing.T) {
	h := Wrap(Hosts{Static: []string{"paxlock-1", "node.example."}, Dynamic: func(h string) bool { return h == "added.example" }},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	cases := []struct {
		name, method, path, host string
		hdr                      map[string]string
		want                     int
	}{
		{"json post", "POST", "/locks/unlock", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json"}, 200},
		{"json post with charset", "POST", "/drain", "[::1]:7301", map[string]string{"Content-Type": "Application/JSON; charset=utf-8"}, 200},
		{"form post", "POST", "/locks/unlock", "127.0.0.1:7301", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"text post", "POST", "/namespaces", "127.0.0.1:7301", map[string]string{"Content-Type": "text/plain"}, 415},
		{"multipart post", "POST", "/namespaces", "127.0.0.1:7301", map[string]string{"Content-Type": "multipart/form-data; boundary=b"}, 415},
		{"bodyless post", "POST", "/drain", "127.0.0.1:7301", nil, 415},
		{"bad media type", "PUT", "/namespaces/x/quota", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json;;"}, 415},
		{"delete without type", "DELETE", "/members/3", "127.0.0.1:7301", nil, 415},
		{"patch json", "PATCH", "/x", "localhost:7301", map[string]string{"Content-Type": "application/json"}, 200},
		{"get without type", "GET", "/status", "127.0.0.1:7301", nil, 200},
		{"localhost", "GET", "/backup", "localhost:7301", nil, 200},
		{"sub.localhost", "GET", "/backup", "a.localhost", nil, 200},
		{"configured name", "GET", "/backup", "PAXLOCK-1:7301", nil, 200},
		{"configured name, trailing dot", "GET", "/backup", "node.example:7301", nil, 200},
		{"member added at run time", "GET", "/backup", "added.example:7301", nil, 200},
		{"rebound name", "GET", "/backup", "evil.example:7301", nil, 403},
		{"rebound name, healthz", "GET", "/healthz", "evil.example:7301", nil, 200},
		{"rebound name, readyz", "GET", "/readyz", "evil.example", nil, 200},
		{"no host", "GET", "/status", "", nil, 403},
		{"foreign origin", "POST", "/drain", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403},
		{"null origin", "POST", "/drain", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403},
		{"other port origin", "POST", "/drain", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:8080"}, 403},
		{"own origin", "POST", "/drain", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:7301"}, 200},
		{"cross-site", "POST", "/drain", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site", "GET", "/backup", "127.0.0.1:7301", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, 403},
		{"same-origin", "GET", "/backup", "127.0.0.1:7301", map[string]string{"Sec-Fetch-Site": "same-origin"}, 200},
		{"typed in", "GET", "/backup", "127.0.0.1:7301", map[string]string{"Sec-Fetch-Site": "none"}, 200},
		{"cross-site navigation", "GET", "/console", "127.0.0.1:7301", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, 200},
		{"cross-site navigating post", "POST", "/drain", "127.0.0.1:7301", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, 403},
	}
	for _, c := range cases {
		req := httptest.NewRequest(c.method, c.path, nil)
		req.Host = c.host
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: %s %s Host %q %v: HTTP %d, want %d", c.name, c.method, c.path, c.host, c.hdr, rec.Code, c.want)
		}
		if rec.Code != 200 && rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: refusal's Content-Type %q, want application/json", c.name, rec.Header().Get("Content-Type"))
		}
	}
}

// TestWrapAnyHost: "*" lets any Host through but not a form POST.
func TestWrapAnyHost(t *testing.T) {
	h := Wrap(Hosts{Static: []string{AnyHost}}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	req := httptest.NewRequest("GET", "/backup", nil)
	req.Host = "anything.example"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("GET under any Host with *: HTTP %d", rec.Code)
	}
	req = httptest.NewRequest("POST", "/drain", nil)
	req.Host = "anything.example"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Errorf("form POST with *: HTTP %d, want 415", rec.Code)
	}
}

// TestRequireToken: 401 without the token or with a wrong one, the
// public requests pass, "" leaves the handler open.
func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	h := RequireToken("tok", func(r *http.Request) bool { return r.URL.Path == "/healthz" }, ok)
	for _, c := range []struct {
		path, auth string
		want       int
	}{{"/status", "", 401}, {"/status", "Bearer nope", 401}, {"/status", "tok", 401}, {"/status", "Bearer tok", 200}, {"/healthz", "", 200}} {
		req := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("GET %s with Authorization %q: HTTP %d, want %d", c.path, c.auth, rec.Code, c.want)
		}
	}
	rec := httptest.NewRecorder()
	RequireToken("", nil, ok).ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	if rec.Code != 200 {
		t.Errorf("no token: HTTP %d, want 200", rec.Code)
	}
}

// FuzzHostOf: HostOf never panics on a Host header and never returns an
// upper-case name.
func FuzzHostOf(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7301", "[::1]:80", "Example.COM.", "http://x:1", "", ":", "[", "0.0.0.0:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := HostOf(s)
		for _, r := range h {
			if r >= 'A' && r <= 'Z' {
				t.Fatalf("HostOf(%q) = %q: not lower case", s, h)
			}
		}
	})
}
