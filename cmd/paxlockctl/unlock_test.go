package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
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
		out := adminapi.ForceUnlocked{Namespace: in.Namespace, Key: in.Key, Released: []adminapi.ReleasedHold{{Client: 7, Owner: 1, Token: 42}}}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer ok.Close()
	t.Setenv(adminapi.TokenEnv, "tok3n")
	flags := []string{"-admin", strings.TrimPrefix(busy.URL, "http://") + "," + strings.TrimPrefix(ok.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}

	if code, _, errOut := runCtl(t, "", append(flags, "unlock", "jobs/1")...); code != 2 || !strings.Contains(errOut, "--force") {
		t.Fatalf("unlock without --force: exit %d, %q", code, errOut)
	}
	code, out, errOut := runCtl(t, "", append(flags, "unlock", "--force", "jobs/1", "-namespace", "orders", "-o", "json")...)
	if code != 0 {
		t.Fatalf("unlock --force: exit %d, %s", code, errOut)
	}
	var got adminapi.ForceUnlocked
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

// TestForceUnlockWaitsForMaster: during an election every node answers
// 503 (no node serves the key's group): unlock --force tries again until
// a node can do it, within -timeout, and fails once -timeout has passed.
func TestForceUnlockWaitsForMaster(t *testing.T) {
	var mu sync.Mutex
	refusals := 3 // requests answered 503 before the election ends
	posts := 0
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		electing := refusals > 0
		refusals--
		mu.Unlock()
		if electing {
			http.Error(w, "this node does not serve the key's group 3 (master: node 0); retry there", http.StatusServiceUnavailable)
			return
		}
		out := adminapi.ForceUnlocked{Namespace: "default", Key: "jobs/2", Released: []adminapi.ReleasedHold{{Client: 7, Owner: 1, Token: 43}}}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer node.Close()
	flags := []string{"-admin", strings.TrimPrefix(node.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}
	code, out, errOut := runCtl(t, "", append(flags, "unlock", "--force", "jobs/2", "-timeout", "1m")...)
	if code != 0 || !strings.Contains(out, "token 43") {
		t.Fatalf("unlock --force during an election: exit %d, %q, %s", code, out, errOut)
	}
	mu.Lock()
	if posts != 4 {
		t.Errorf("%d requests, want 4 (3 refused, then done)", posts)
	}
	refusals = 1 << 30 // an election that does not end
	mu.Unlock()
	start := time.Now()
	code, _, errOut = runCtl(t, "", append(flags, "unlock", "--force", "jobs/2", "-timeout", "300ms")...)
	if code == 0 || !strings.Contains(errOut, "no master") {
		t.Fatalf("unlock --force with no master for longer than -timeout: exit %d, %q", code, errOut)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("unlock --force gave up after %v, -timeout 300ms", d)
	}
}
