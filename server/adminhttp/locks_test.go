package adminhttp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/adminguard"
)

// lockFake is a fakeNode that answers the lock reads: it records the
// query and key asked, and answers with page and detail or err.
type lockFake struct {
	fakeNode
	q      LockQuery
	key    string
	page   adminapi.LockPage
	detail adminapi.LockDetail
	err    error
}

func (f *lockFake) ListLocks(_ context.Context, q LockQuery) (adminapi.LockPage, error) {
	f.q = q
	return f.page, f.err
}

func (f *lockFake) InspectKey(_ context.Context, _, key string) (adminapi.LockDetail, error) {
	f.key = key
	return f.detail, f.err
}

// TestLockReadAnswers: GET /locks parses its query (defaults, bounds,
// groups, local) and maps the node's errors; GET /locks/{ns}/{key} takes
// a key with slashes, redirects to the key's master when this node is not
// it, and answers 503 when that master has no known address.
func TestLockReadAnswers(t *testing.T) {
	t.Parallel()
	f := &lockFake{fakeNode: fakeNode{master: 2, addrs: map[uint32]string{2: "node2:7301"}},
		page: adminapi.LockPage{Namespace: "ns", Locks: []adminapi.LockSummary{{Key: "a", Token: 3}}, Next: "a"}}
	serveLocks := func(path string) (int, string) {
		h := New(Config{Node: f, Hosts: hostsNode1})
		return serveWith(t, h, http.MethodGet, path)
	}
	code, body := serveLocks("/locks?namespace=ns&prefix=jo%2Fb&after=x")
	var page adminapi.LockPage
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil || !reflect.DeepEqual(page, f.page) {
		t.Fatalf("GET /locks: HTTP %d %q, want the node's page", code, body)
	}
	if want := (LockQuery{Namespace: "ns", Prefix: "jo/b", After: "x", Limit: adminapi.ListLimit}); !reflect.DeepEqual(f.q, want) {
		t.Errorf("query %+v, want %+v", f.q, want)
	}
	if code, _ := serveLocks("/locks?namespace=ns&limit=1000&groups=1,4&local=1"); code != http.StatusOK ||
		!reflect.DeepEqual(f.q.Groups, []int{1, 4}) || !f.q.Local || f.q.Limit != 1000 {
		t.Errorf("groups and local: HTTP %d, query %+v", code, f.q)
	}
	for path, want := range map[string]int{
		"/locks":                         http.StatusBadRequest,
		"/locks?namespace=ns&limit=0":    http.StatusBadRequest,
		"/locks?namespace=ns&limit=1001": http.StatusBadRequest,
		"/locks?namespace=ns&groups=x":   http.StatusBadRequest,
		"/locks?namespace=other":         http.StatusNotFound,
		"/locks/other/k":                 http.StatusNotFound,
	} {
		if code, body := serveLocks(path); code != want {
			t.Errorf("GET %s: HTTP %d %q, want %d", path, code, body, want)
		}
	}
	f.err = ErrNotMaster
	if code, _ := serveLocks("/locks?namespace=ns"); code != http.StatusServiceUnavailable {
		t.Errorf("a group without a master: HTTP %d, want 503", code)
	}

	f.err, f.detail = nil, adminapi.LockDetail{Namespace: "ns", Key: "a/b/c", Held: true, Master: 1}
	code, body = serveLocks("/locks/ns/a/b/c")
	var d adminapi.LockDetail
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil || f.key != "a/b/c" || !d.Held {
		t.Fatalf("GET /locks/ns/a/b/c: HTTP %d %q, key asked %q", code, body, f.key)
	}
	f.err = ErrNotMaster
	h := New(Config{Node: f, Hosts: hostsNode1})
	rec := serveRec(t, h, http.MethodGet, "/locks/ns/k")
	if rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "http://node2:7301/locks/ns/k" {
		t.Errorf("not the key's master: HTTP %d to %q, want 307 to node 2", rec.Code, rec.Header().Get("Location"))
	}
	f.master = 3
	if code, _ := serveLocks("/locks/ns/k"); code != http.StatusServiceUnavailable {
		t.Errorf("the key's master without an address: HTTP %d, want 503", code)
	}
}

// hostsNode1 is what serve's requests name as their host.
var hostsNode1 = adminguard.Hosts{Static: []string{"node1"}}

// serveRec sends a body-less request to h as serve does.
func serveRec(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.Host = "node1:7301"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// serveWith is serveRec's status and body.
func serveWith(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := serveRec(t, h, method, path)
	return rec.Code, rec.Body.String()
}
