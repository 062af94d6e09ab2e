package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

// adminGet returns the status code and trimmed body of GET path on an
// admin address.
func adminGet(t *testing.T, addr, path string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// TestHealthAndReadiness: on a running 3-node cluster every node is alive
// and becomes ready; with two nodes stopped the third stays alive but is
// not ready and says why; with one of them back it is ready again.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	wait := 60 * time.Second
	for i := range 3 {
		addr := tc.cfgs[i].AdminAddr
		code, body, err := adminGet(t, addr, "/healthz")
		if err != nil || code != http.StatusOK || body != "ok" {
			t.Fatalf("node %d /healthz: %d %q %v, want 200 ok", i+1, code, body, err)
		}
		testutil.Eventually(t, wait, func() bool {
			code, body, err := adminGet(t, addr, "/readyz")
			return err == nil && code == http.StatusOK && body == "ready"
		}, "node %d /readyz answering 200 ready", i+1)
	}

	tc.stop(1)
	tc.stop(2)
	addr := tc.cfgs[0].AdminAddr
	var last string
	testutil.Eventually(t, wait, func() bool {
		code, body, err := adminGet(t, addr, "/readyz")
		last = body
		return err == nil && code == http.StatusServiceUnavailable
	}, "node 1 /readyz answering 503 with two of three nodes stopped")
	t.Logf("node 1 without a quorum: /readyz 503 %q", last)
	if last == "" || strings.Contains(last, "\n") || len(last) > 200 {
		t.Errorf("503 reason %q: want one short line", last)
	}
	if ok, why := tc.nodes[0].Ready(); ok {
		t.Errorf("Ready() = true (%s) with two of three nodes stopped", why)
	}
	if code, body, err := adminGet(t, addr, "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("node 1 /healthz without a quorum: %d %q %v, want 200", code, body, err)
	}

	tc.start(1)
	testutil.Eventually(t, wait, func() bool {
		code, _, err := adminGet(t, addr, "/readyz")
		return err == nil && code == http.StatusOK
	}, "node 1 /readyz answering 200 again with node 2 back")
}
