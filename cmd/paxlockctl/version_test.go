package main

import (
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestBuildVersion: a node reports the build it runs in /status (its
// fields and one-line form), as paxlock_build_info{version,commit,go} in
// /metrics, and paxlockctl status prints it per node.
func TestBuildVersion(t *testing.T) {
	_, admin := startOpsNode(t)
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v", path, resp.Status, err)
		}
		return b
	}
	var st struct {
		Build   map[string]any `json:"build"`
		Version string         `json:"version"`
	}
	if err := json.Unmarshal(get("/status"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Build["go_version"] != runtime.Version() || !strings.HasSuffix(st.Version, runtime.Version()) {
		t.Errorf("/status build %v, version %q; want %s", st.Build, st.Version, runtime.Version())
	}
	metrics := string(get("/metrics"))
	var line string
	for l := range strings.SplitSeq(metrics, "\n") {
		if strings.HasPrefix(l, "paxlock_build_info{") {
			line = l
		}
	}
	if !strings.Contains(line, `go="`+runtime.Version()+`"`) || !strings.Contains(line, `commit="`) || !strings.Contains(line, `version="`) || !strings.HasSuffix(line, "} 1") {
		t.Errorf("paxlock_build_info: %q", line)
	}
	code, out, errOut := runCtl(t, "", "status", "-o", "json", "-admin", admin, "-admin-ca", "", "-admin-token-file", "")
	var so statusOutput
	if err := json.Unmarshal([]byte(out), &so); code != 0 || err != nil || len(so.Nodes) != 1 || so.Nodes[0].Version != st.Version {
		t.Errorf("status -o json: exit %d, %q, %v (%s); want the node's version %q", code, out, err, errOut, st.Version)
	}
}
