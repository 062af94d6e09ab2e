package adminhttp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// forwardFake is a lockFake whose peers answer forwarded requests with
// answer (or err), recording what was asked of which node.
type forwardFake struct {
	lockFake
	answer             Forwarded
	ferr               error
	to                 uint32
	method, uri, fbody string
}

func (f *forwardFake) Forward(_ context.Context, id uint32, method, uri string, body []byte) (Forwarded, error) {
	f.to, f.method, f.uri, f.fbody = id, method, uri, string(body)
	return f.answer, f.ferr
}

// TestConsoleLockForwarding: the console's lock page and force-unlock
// are answered by the key's master through the page's node: forwarded
// (path kept escaped, body kept) when the master is another node with an
// address, answered here when it is this node; a master that redirects
// or cannot be asked is 503 for the page to retry, never a redirect the
// browser would follow to another origin.
func TestConsoleLockForwarding(t *testing.T) {
	t.Parallel()
	f := &forwardFake{lockFake: lockFake{fakeNode: fakeNode{master: 2, addrs: map[uint32]string{2: "node2:7301"}}},
		answer: Forwarded{Status: http.StatusOK, ContentType: "application/json", Body: []byte(`{"key":"a/b c"}`)}}
	do := func(method, path, body string) *httptest.ResponseRecorder {
		h := New(Config{Node: f, Hosts: hostsNode1})
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Host = "node1:7301"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := do(http.MethodGet, "/cluster/locks/ns/a/b%20c", "")
	if rec.Code != http.StatusOK || rec.Body.String() != `{"key":"a/b c"}` || f.to != 2 || f.method != http.MethodGet || f.uri != "/locks/ns/a/b%20c" {
		t.Errorf("lock page, master node 2: HTTP %d %q; asked node %d %s %s", rec.Code, rec.Body, f.to, f.method, f.uri)
	}
	const unlock = `{"namespace":"ns","key":"k"}`
	f.answer = Forwarded{Status: http.StatusAccepted, ContentType: "application/json", Body: []byte(`{"pending":true}`)}
	rec = do(http.MethodPost, "/cluster/unlock", unlock)
	if rec.Code != http.StatusAccepted || f.method != http.MethodPost || f.uri != "/locks/unlock" || f.fbody != unlock {
		t.Errorf("force-unlock, master node 2: HTTP %d; asked %s %s %q", rec.Code, f.method, f.uri, f.fbody)
	}
	f.answer = Forwarded{Status: http.StatusTemporaryRedirect}
	if rec := do(http.MethodGet, "/cluster/locks/ns/k", ""); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Location") != "" {
		t.Errorf("the master redirected: HTTP %d to %q, want 503", rec.Code, rec.Header().Get("Location"))
	}
	f.ferr = errors.New("connection refused")
	if rec := do(http.MethodPost, "/cluster/unlock", unlock); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "connection refused") {
		t.Errorf("the master unreachable: HTTP %d %q, want 503 with the error", rec.Code, rec.Body)
	}
	if rec := do(http.MethodGet, "/cluster/locks/other/k", ""); rec.Code != http.StatusNotFound {
		t.Errorf("unknown namespace: HTTP %d, want 404", rec.Code)
	}

	// This node is the master (no address of its own): served here.
	f.master, f.to = 1, 0
	f.detail = adminapi.LockDetail{Namespace: "ns", Key: "k", Held: true, Master: 1}
	if rec := do(http.MethodGet, "/cluster/locks/ns/k", ""); rec.Code != http.StatusOK || f.key != "k" || f.to != 0 {
		t.Errorf("lock page, master here: HTTP %d, key read %q, forwarded to %d", rec.Code, f.key, f.to)
	}
	f.unlocked = []adminapi.ReleasedHold{{Token: 9}}
	if rec := do(http.MethodPost, "/cluster/unlock", unlock); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"token":9`) || f.to != 0 {
		t.Errorf("force-unlock, master here: HTTP %d %q, forwarded to %d", rec.Code, rec.Body, f.to)
	}
	if rec := do(http.MethodPost, "/cluster/unlock", "{"); rec.Code != http.StatusBadRequest {
		t.Errorf("bad body: HTTP %d, want 400", rec.Code)
	}
}

// TestConsoleUnmoving: /events tells a change without the time and the
// nodes' uptimes, which move on an unchanged cluster, and leaves the
// status it sends as it was.
func TestConsoleUnmoving(t *testing.T) {
	t.Parallel()
	cs := adminapi.ClusterStatus{Time: time.Unix(5, 0), Nodes: []adminapi.ConsoleNode{{ID: 1, UptimeMs: 1500}}}
	u := unmoving(cs)
	later := cs
	later.Time, later.Nodes = time.Unix(6, 0), []adminapi.ConsoleNode{{ID: 1, UptimeMs: 2500}}
	if !reflect.DeepEqual(u, unmoving(later)) {
		t.Errorf("the time and the uptime told a change: %+v, %+v", u, unmoving(later))
	}
	if cs.Nodes[0].UptimeMs != 1500 || !cs.Time.Equal(time.Unix(5, 0)) {
		t.Errorf("unmoving changed the status sent: %+v", cs)
	}
	later.Nodes[0].Ready = true
	if reflect.DeepEqual(u, unmoving(later)) {
		t.Error("a node becoming ready told no change")
	}
}
