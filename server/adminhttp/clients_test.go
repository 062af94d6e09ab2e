package adminhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// clientsFake is a fakeNode that answers GET /clients: it records the
// query and answers with page or err.
type clientsFake struct {
	fakeNode
	q    ClientQuery
	page adminapi.ClientPage
	err  error
}

func (f *clientsFake) ListClients(_ context.Context, q ClientQuery) (adminapi.ClientPage, error) {
	f.q = q
	return f.page, f.err
}

// TestClientsAnswers: GET /clients parses its query (the default page,
// node, namespace, the cursor, local), refuses a page above
// MaxClientsLimit, a bad cursor, node or namespace (400), and answers 404
// for a node that is no member and 503 when the node cannot gather.
func TestClientsAnswers(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 1700000000123456789).UTC()
	f := &clientsFake{page: adminapi.ClientPage{Clients: []adminapi.ClientSession{{Client: "1f", Namespace: "ns", Remote: "10.0.0.1:5000",
		Connected: at, Node: 2, TLS: true, InFlight: 1, Waits: 2, Watches: 3}}, Next: "2/1/1f/x"}}
	serveClients := func(path string) (int, string) {
		return serveWith(t, New(Config{Node: f, Hosts: hostsNode1}), http.MethodGet, path)
	}
	code, body := serveClients("/clients")
	var page adminapi.ClientPage
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil || !reflect.DeepEqual(page, f.page) {
		t.Fatalf("GET /clients: HTTP %d %q, want the node's page", code, body)
	}
	if want := (ClientQuery{Limit: adminapi.ClientsLimit}); !reflect.DeepEqual(f.q, want) {
		t.Errorf("default query %+v, want %+v", f.q, want)
	}
	cur := adminapi.ClientCursor{Node: 3, Connected: at.UnixNano(), Client: "ab", Remote: "[::1]:7"}
	code, _ = serveClients(fmt.Sprintf("/clients?node=3&namespace=ns&limit=%d&local=1&after=%s", adminapi.MaxClientsLimit, cur))
	if want := (ClientQuery{Node: 3, Namespace: "ns", After: cur, HasAfter: true, Limit: adminapi.MaxClientsLimit, Local: true}); code != http.StatusOK || !reflect.DeepEqual(f.q, want) {
		t.Errorf("HTTP %d, query %+v, want %+v", code, f.q, want)
	}
	for _, q := range []string{"limit=0", fmt.Sprintf("limit=%d", adminapi.MaxClientsLimit+1), "node=0", "node=x", "namespace=a%20b", "after=1/2", "after=x/1/a/b"} {
		if code, _ := serveClients("/clients?" + q); code != http.StatusBadRequest {
			t.Errorf("GET /clients?%s: HTTP %d, want 400", q, code)
		}
	}
	f.err = fmt.Errorf("node 9: %w", ErrNotFound)
	if code, _ := serveClients("/clients?node=9"); code != http.StatusNotFound {
		t.Errorf("a node that is no member: HTTP %d, want 404", code)
	}
	f.err = context.DeadlineExceeded
	if code, _ := serveClients("/clients"); code != http.StatusServiceUnavailable {
		t.Errorf("gathering timed out: HTTP %d, want 503", code)
	}
}
