package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/server"
)

// TestForceUnlock: unlock needs --force, posts the namespace and key with
// the admin token, moves on from a node that cannot do it (503) to one
// that can, and prints the holds removed as JSON or a table.
func TestForceUnlock(t *testing.T) {
	var mu sync.Mutex
	var posted []string
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not the master", http.StatusServiceUnavailable)
	}))
	defer busy.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		var in struct{ Namespace, Key string }
		_ = json.Unmarshal(b, &in)
		out := server.ForceUnlocked{Namespace: in.Namespace, Key: in.Key, Released: []server.ReleasedHold{{Client: 7, Owner: 1, Token: 42}}}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer ok.Close()
	t.Setenv(server.AdminTokenEnv, "tok3n")
	flags := []string{"-admin", strings.TrimPrefix(busy.URL, "http://") + "," + strings.TrimPrefix(ok.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}

	if code, _, errOut := runCtl(t, "", append(flags, "unlock", "jobs/1")...); code != 2 || !strings.Contains(errOut, "--force") {
		t.Fatalf("unlock without --force: exit %d, %q", code, errOut)
	}
	code, out, errOut := runCtl(t, "", append(flags, "unlock", "--force", "jobs/1", "-namespace", "orders", "-o", "json")...)
	if code != 0 {
		t.Fatalf("unlock --force: exit %d, %s", code, errOut)
	}
	var got server.ForceUnlocked
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Key != "jobs/1" || got.Namespace != "orders" || len(got.Released) != 1 || got.Released[0].Token != 42 {
		t.Fatalf("unlock -o json printed %q (%v)", out, err)
	}
	if code, out, _ := runCtl(t, "", append(flags, "unlock", "--force", "jobs/1")...); code != 0 || !strings.Contains(out, "token 42") {
		t.Fatalf("unlock table: exit %d, %q", code, out)
	}
	mu.Lock()
	defer mu.Unlock()
	want := `POST /locks/unlock Bearer tok3n {"key":"jobs/1","namespace":"orders"}`
	if len(posted) != 2 || posted[0] != want {
		t.Fatalf("posted %q, want %q first", posted, want)
	}
}
