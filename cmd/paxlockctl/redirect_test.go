package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAdminClientRedirectDropsToken: a redirect to another host is
// followed without the admin token (the host it names never sees it),
// one to the same host keeps it, and a change carries Content-Type:
// application/json even without a body.
func TestAdminClientRedirectDropsToken(t *testing.T) {
	var auth, ctype atomic.Value
	auth.Store("")
	ctype.Store("")
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		ctype.Store(r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()
	elsewhere := strings.Replace(sink.URL, "127.0.0.1", "localhost", 1)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to := elsewhere
		if r.URL.Query().Get("same") == "1" {
			to = sink.URL
		}
		http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redir.Close()
	tok := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tok, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ac, err := newAdminClient([]string{strings.TrimPrefix(redir.URL, "http://")}, "", tok, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ac.change(context.Background(), http.MethodPost, "/drain", nil); err != nil {
		t.Fatal(err)
	}
	if a := auth.Load().(string); a != "" {
		t.Fatalf("the host a redirect named got Authorization %q", a)
	}
	if c := ctype.Load().(string); c != "application/json" {
		t.Fatalf("a body-less POST carried Content-Type %q, want application/json", c)
	}
	if _, _, err := ac.change(context.Background(), http.MethodPost, "/drain?same=1", nil); err != nil {
		t.Fatal(err)
	}
	if a := auth.Load().(string); a != "Bearer secret-token" {
		t.Fatalf("the same host got Authorization %q, want the token", a)
	}
}
