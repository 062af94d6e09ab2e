package registry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAdminClientRedirectDropsToken: the registry's admin client follows
// a redirect to a host that is neither the cluster's nor the first one's
// without the token, keeps it for the same host, and sends body-less
// changes as application/json.
func TestAdminClientRedirectDropsToken(t *testing.T) {
	t.Parallel()
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
	a, err := newAdminClient("c", []string{strings.TrimPrefix(redir.URL, "http://")}, "", "secret-token")
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if _, err := a.do(context.Background(), http.MethodDelete, "/x", nil, http.StatusNoContent); err != nil {
		t.Fatal(err)
	}
	if got := auth.Load().(string); got != "" {
		t.Fatalf("the host a redirect named got Authorization %q", got)
	}
	if c := ctype.Load().(string); c != "application/json" {
		t.Fatalf("a body-less DELETE carried Content-Type %q, want application/json", c)
	}
	if _, err := a.do(context.Background(), http.MethodDelete, "/x?same=1", nil, http.StatusNoContent); err != nil {
		t.Fatal(err)
	}
	if got := auth.Load().(string); got != "Bearer secret-token" {
		t.Fatalf("the same host got Authorization %q, want the token", got)
	}
}
