package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// TestAdminClient: paxlockctl verifies the admin endpoint's HTTPS against
// -admin-ca, sends the token from PAXLOCK_ADMIN_TOKEN or else
// -admin-token-file, and keeps it when a node redirects to another.
func TestAdminClient(t *testing.T) {
	var seen []string
	final := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, "final:"+r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(adminapi.Status{Node: 7})
	}))
	defer final.Close()
	redirect := httptest.NewUnstartedServer(http.RedirectHandler(final.URL+"/status", http.StatusTemporaryRedirect))
	redirect.TLS = final.TLS
	redirect.StartTLS()
	defer redirect.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: final.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "https://") }

	t.Setenv(adminapi.TokenEnv, "")
	ac, err := newAdminClient([]string{host(redirect)}, ca, tokFile, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ac.fetchStatus(context.Background(), host(redirect))
	if err != nil || st.Node != 7 {
		t.Fatalf("fetchStatus through a redirect: %+v %v", st, err)
	}
	t.Setenv(adminapi.TokenEnv, "from-env")
	ac, err = newAdminClient([]string{host(final)}, ca, tokFile, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.fetchStatus(context.Background(), host(final)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"final:Bearer from-file", "final:Bearer from-env"}; strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("server saw %q, want %q", seen, want)
	}

	// Without -admin-ca the client speaks plain HTTP, which the TLS server
	// refuses.
	ac, err = newAdminClient([]string{host(final)}, "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.fetchStatus(context.Background(), host(final)); err == nil {
		t.Fatal("plain HTTP to an HTTPS admin endpoint succeeded")
	}
	if _, err := newAdminClient(nil, filepath.Join(dir, "missing"), "", true); err == nil {
		t.Fatal("a missing -admin-ca file was accepted")
	}
}
