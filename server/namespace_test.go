package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

func adminDo(t *testing.T, method, url string, body any) int {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	// 503: the group the change goes to is between masters (a loaded
	// machine lets a lease lapse); the change was not made, and is sent
	// again, as an operator's tool does.
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequest(method, url, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp.StatusCode
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Namespaces live in lock group 0 (Paxos group 1): a change made through any node is
// seen by every node; a wrong secret, an unknown or removed namespace is
// refused.
func TestNamespacesReplicated(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	admin := "http://" + tc.cfgs[2].Nodes[2].Admin
	waitFor(t, "configured namespaces installed", func() bool { return tc.nodes[0].svc.NamespacesInitialised() })
	if code := adminDo(t, http.MethodPost, admin+"/namespaces", map[string]string{"name": "tenant", "secret": "pw"}); code != http.StatusNoContent {
		t.Fatalf("add: HTTP %d", code)
	}
	for _, s := range tc.nodes {
		waitFor(t, "namespace on every node", func() bool { return s.svc.HasNamespace("tenant") })
		rc := dialRaw(t, s.cfg.self().Client)
		if r := rc.hello("tenant", "pw", 5); r.Status != wire.StatusSuccess {
			t.Fatalf("hello to node %d: %+v", s.cfg.NodeID, r)
		}
		if r := rc.hello("tenant", "wrong", 5); r.Status != wire.StatusAuthFailed {
			t.Fatalf("wrong secret: %+v", r)
		}
	}
	if code := adminDo(t, http.MethodDelete, admin+"/namespaces?name=tenant", nil); code != http.StatusNoContent {
		t.Fatalf("remove: HTTP %d", code)
	}
	for _, s := range tc.nodes {
		waitFor(t, "namespace gone everywhere", func() bool { return !s.svc.HasNamespace("tenant") })
		rc := dialRaw(t, s.cfg.self().Client)
		if r := rc.hello("tenant", "pw", 5); r.Status != wire.StatusAuthFailed {
			t.Fatalf("removed namespace: %+v", r)
		}
	}
	// The configured namespaces still work, and a removed one does not
	// come back from the config file.
	rc := dialRaw(t, tc.nodes[0].cfg.self().Client)
	if r := rc.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("configured namespace: %+v", r)
	}
	if code := adminDo(t, http.MethodDelete, admin+"/namespaces?name=other", nil); code != http.StatusNoContent {
		t.Fatalf("remove configured: HTTP %d", code)
	}
	tc.stop(0)
	tc.start(0)
	waitFor(t, "removed stays removed", func() bool {
		return tc.nodes[0].svc.NamespacesInitialised() && !tc.nodes[0].svc.HasNamespace("other") && tc.nodes[0].svc.HasNamespace("ns")
	})
}
