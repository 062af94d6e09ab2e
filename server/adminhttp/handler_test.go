package adminhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/adminguard"
)

// fakeNode answers the few Node methods a test drives; any other call
// panics (the embedded nil Node).
type fakeNode struct {
	Node
	master   uint32            // group 0's master
	addrs    map[uint32]string // admin addresses of the other nodes
	putErr   error             // what a namespace change returns
	unlocked []adminapi.ReleasedHold
	unlock   error
}

func (f *fakeNode) SystemMaster() uint32        { return f.master }
func (f *fakeNode) AdminAddr(id uint32) string  { return f.addrs[id] }
func (f *fakeNode) HasNamespace(ns string) bool { return ns == "ns" }
func (f *fakeNode) KeyMaster(string, string) (int, uint32) {
	return 3, f.master
}

func (f *fakeNode) PutNamespace(context.Context, string, string) error { return f.putErr }

func (f *fakeNode) ForceUnlock(context.Context, string, string) ([]adminapi.ReleasedHold, error) {
	return f.unlocked, f.unlock
}

func serve(t *testing.T, f *fakeNode, https bool, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	h := New(Config{Node: f, HTTPS: https, Hosts: adminguard.Hosts{Static: []string{"node1"}}})
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = "node1:7301"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestNamespaceChangeAnswers: a change the node cannot propose is
// redirected to group 0's master (307, keeping the scheme and the path),
// or answered 503 naming it when its admin address is unknown; the lock
// service's errors map to 404 and 400.
func TestNamespaceChangeAnswers(t *testing.T) {
	t.Parallel()
	body := `{"name": "ns", "secret": "s3cret"}`
	f := &fakeNode{master: 2, addrs: map[uint32]string{2: "node2:7301"}, putErr: fmt.Errorf("x: %w", ErrNotSystemMaster)}
	rec := serve(t, f, true, http.MethodPost, "/namespaces?a=1", body)
	if rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "https://node2:7301/namespaces?a=1" {
		t.Fatalf("not the master: HTTP %d to %q, want 307 to node 2", rec.Code, rec.Header().Get("Location"))
	}
	f.master = 3
	if rec := serve(t, f, false, http.MethodPost, "/namespaces", body); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "master: node 3") {
		t.Fatalf("master without an address: HTTP %d %q, want 503 naming node 3", rec.Code, rec.Body)
	}
	f.putErr = ErrNotFound
	if rec := serve(t, f, false, http.MethodPost, "/namespaces", body); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown namespace: HTTP %d, want 404", rec.Code)
	}
	if rec := serve(t, f, false, http.MethodPost, "/namespaces", `{"name": "ns"}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("neither secret nor verifier: HTTP %d, want 400", rec.Code)
	}
	f.putErr = nil
	if rec := serve(t, f, false, http.MethodPost, "/namespaces", body); rec.Code != http.StatusNoContent || strings.Contains(rec.Body.String(), "s3cret") {
		t.Fatalf("a change: HTTP %d %q, want 204 and no secret echoed", rec.Code, rec.Body)
	}
}

// TestForceUnlockAnswers: holds removed before an error are still
// listed (500); a node that does not serve the key's group redirects to
// its master; an unknown namespace is 404.
func TestForceUnlockAnswers(t *testing.T) {
	t.Parallel()
	body := `{"namespace": "ns", "key": "k"}`
	f := &fakeNode{master: 2, addrs: map[uint32]string{2: "node2:7301"},
		unlocked: []adminapi.ReleasedHold{{Client: 9, Owner: 1, Token: 7}}, unlock: ErrNotMaster}
	rec := serve(t, f, false, http.MethodPost, "/locks/unlock", body)
	var out adminapi.ForceUnlocked
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusInternalServerError || len(out.Released) != 1 || out.Released[0].Token != 7 {
		t.Fatalf("some holds removed, then not master: HTTP %d %+v %v, want 500 listing the hold", rec.Code, out, err)
	}
	f.unlocked = nil
	if rec := serve(t, f, false, http.MethodPost, "/locks/unlock", body); rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "http://node2:7301/locks/unlock" {
		t.Fatalf("not the key's master: HTTP %d to %q, want 307 to node 2", rec.Code, rec.Header().Get("Location"))
	}
	f.unlock = nil
	rec = serve(t, f, false, http.MethodPost, "/locks/unlock", body)
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusOK || out.Released == nil || len(out.Released) != 0 {
		t.Fatalf("a free key: HTTP %d %q, want 200 with released []", rec.Code, rec.Body)
	}
	if rec := serve(t, f, false, http.MethodPost, "/locks/unlock", `{"namespace": "other", "key": "k"}`); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown namespace: HTTP %d, want 404", rec.Code)
	}
}
