package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// quotaServer is a fake node's admin endpoint for the namespace commands:
// namespace orders has quota cur; PUTs are recorded.
type quotaServer struct {
	*httptest.Server
	mu  sync.Mutex
	cur adminapi.NamespaceQuota
	put []adminapi.NamespaceQuota
}

func newQuotaServer(t *testing.T, cur adminapi.NamespaceQuota) *quotaServer {
	s := &quotaServer{cur: cur}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		st := adminapi.QuotaStatus{Namespace: "orders", Quota: s.cur, Held: 3}
		switch {
		case r.URL.Path == "/namespaces" && r.Method == http.MethodGet:
			_ = json.NewEncoder(w).Encode([]string{"default", "orders"})
		case r.URL.Path == "/namespaces/quotas":
			_ = json.NewEncoder(w).Encode([]adminapi.QuotaStatus{st})
		case r.URL.Path == "/namespaces/orders/quota" && r.Method == http.MethodGet:
			_ = json.NewEncoder(w).Encode(st)
		case r.URL.Path == "/namespaces/orders/quota" && r.Method == http.MethodPut:
			var q adminapi.NamespaceQuota
			b, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(b, &q); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			s.put = append(s.put, q)
			s.cur = q
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestNamespaceSetQuota: set-quota changes the limits it is given and
// keeps the others (a burst goes with the rate); without a limit it is a
// usage error; namespace list shows the quotas, in both outputs.
func TestNamespaceSetQuota(t *testing.T) {
	s := newQuotaServer(t, adminapi.NamespaceQuota{Held: 5, Rate: 100, Burst: 10})
	t.Setenv(adminapi.TokenEnv, "")
	flags := []string{"-admin", strings.TrimPrefix(s.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}
	if code, _, errOut := runCtl(t, "", append(flags, "namespace", "set-quota", "orders")...); code != 2 || !strings.Contains(errOut, "-held") {
		t.Errorf("set-quota without a limit: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCtl(t, "", append(flags, "namespace", "set-quota", "orders", "-held", "-1")...); code != 2 {
		t.Errorf("a negative limit: exit %d, %q", code, errOut)
	}
	code, out, errOut := runCtl(t, "", append(flags, "namespace", "set-quota", "orders", "-waiters", "7", "-o", "json")...)
	if code != 0 {
		t.Fatalf("set-quota: exit %d, %s", code, errOut)
	}
	var qc quotaChange
	if err := json.Unmarshal([]byte(out), &qc); err != nil || !qc.Done || qc.Quota != (adminapi.NamespaceQuota{Held: 5, Waiters: 7, Rate: 100, Burst: 10}) {
		t.Errorf("set-quota -o json printed %q (%v)", out, err)
	}
	if code, out, errOut := runCtl(t, "", append(flags, "namespace", "set-quota", "orders", "-rate", "0")...); code != 0 || !strings.Contains(out, "rate unlimited") {
		t.Fatalf("set-quota -rate 0: exit %d, %q %s", code, out, errOut)
	}
	s.mu.Lock()
	want := []adminapi.NamespaceQuota{{Held: 5, Waiters: 7, Rate: 100, Burst: 10}, {Held: 5, Waiters: 7}}
	if len(s.put) != 2 || s.put[0] != want[0] || s.put[1] != want[1] {
		t.Errorf("PUT %+v, want %+v", s.put, want)
	}
	s.mu.Unlock()
	code, out, _ = runCtl(t, "", append(flags, "namespace", "list")...)
	if code != 0 || !strings.Contains(out, "orders\tquota: held 5, waiters 7, rate unlimited/s, burst unlimited; 3 holders") || !strings.Contains(out, "default\n") {
		t.Errorf("namespace list: exit %d, %q", code, out)
	}
	code, out, _ = runCtl(t, "", append(flags, "namespace", "list", "-o", "json")...)
	var list namespacesOutput
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Quotas) != 1 || list.Quotas[0].Quota.Waiters != 7 {
		t.Errorf("namespace list -o json: exit %d, %q, %v", code, out, err)
	}
}
