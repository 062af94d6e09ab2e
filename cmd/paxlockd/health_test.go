package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthProbe runs paxlockd -health against an admin endpoint that is
// alive but not ready, over HTTP and over HTTPS (admin_tls): healthz
// exits 0, readyz 1 with the status, an endpoint nobody serves 1, and an
// unknown endpoint name is refused.
func TestHealthProbe(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			_, _ = w.Write([]byte("ok\n"))
		case "/readyz":
			http.Error(w, "group 3: no quorum", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	})
	for _, tlsOn := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(h)
		adminTLS := ""
		if tlsOn {
			srv.StartTLS()
			adminTLS = `"admin_tls": {"cert": "unused.crt", "key": "unused.key"},`
		} else {
			srv.Start()
		}
		port := srv.Listener.Addr().String()[strings.LastIndexByte(srv.Listener.Addr().String(), ':')+1:]
		cfg := writeFile(t, fmt.Sprintf("health-%v.json", tlsOn), `{"node_id": 1, "data_dir": "d", `+adminTLS+`
			"admin_addr": "0.0.0.0:`+port+`", "nodes": [{"id": 1, "peer": "127.0.0.1:7201", "client": "127.0.0.1:7101"}]}`)
		if code, out := runPaxlockd(t, "-config", cfg, "-health", "healthz"); code != 0 {
			t.Errorf("tls %v: -health healthz: exit %d: %s", tlsOn, code, out)
		}
		if code, out := runPaxlockd(t, "-config", cfg, "-health", "readyz"); code != 1 || !strings.Contains(out, "503") {
			t.Errorf("tls %v: -health readyz of a node without quorum: exit %d: %s", tlsOn, code, out)
		}
		srv.Close()
		if code, _ := runPaxlockd(t, "-config", cfg, "-health", "healthz"); code != 1 {
			t.Errorf("tls %v: -health healthz with nobody listening: exit %d, want 1", tlsOn, code)
		}
	}
	if code, out := runPaxlockd(t, "-config", "x.json", "-health", "status"); code != 1 || !strings.Contains(out, "healthz or readyz") {
		t.Errorf("-health status: exit %d: %s", code, out)
	}
}
