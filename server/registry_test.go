package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/registry"
)

const (
	testRegNS     = "registry"
	testRegSecret = "registry-secret"
)

// startMeta starts a meta cluster of n nodes whose registry_namespace is
// testRegNS.
func startMeta(t *testing.T, n int) *testCluster {
	return startClusterWith(t, n, func(c *Config) {
		c.RegistryNamespace = testRegNS
		c.Namespaces = append(c.Namespaces, Namespace{Name: testRegNS, Secret: testRegSecret})
	})
}

// adminOK sends a change to a node's admin API (following a redirect to
// group 0's master) until it is answered 204: a 503 (a master change
// under way, no master known yet) is retried.
func adminOK(t *testing.T, method, url string, body any) {
	t.Helper()
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, url, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent, fmt.Sprintf("HTTP %d %s", resp.StatusCode, msg)
	}, "%s %s", method, url)
}

// TestRegistrySubscriptionAuth: only a session of the node's
// registry_namespace may subscribe to the registry tables (an
// unauthenticated connection and another namespace's session are
// refused AUTH_FAILED); a subscriber gets the tables, then a push after
// each change, and a resubscription at its version is answered
// Unchanged. GET /registry shows the tables without verifiers.
func TestRegistrySubscriptionAuth(t *testing.T) {
	t.Parallel()
	meta := startMeta(t, 3)
	addr := meta.cfgs[0].Nodes[0].Client
	admin := "http://" + meta.cfgs[0].Nodes[1].Admin

	anon := dialRaw(t, addr)
	if r := anon.call(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{}); r.Status != wire.StatusAuthFailed {
		t.Fatalf("unauthenticated subscription: %+v, want AUTH_FAILED", r)
	}
	other := dialRaw(t, addr)
	if r := other.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	if r := other.call(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{}); r.Status != wire.StatusAuthFailed {
		t.Fatalf("another namespace's subscription: %+v, want AUTH_FAILED", r)
	}

	sub := dialRaw(t, addr)
	if r := sub.hello(testRegNS, testRegSecret, 2); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	first, ok := sub.callAny(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{}).(*wire.RegistryTables)
	if !ok || len(first.Clusters) != 0 {
		t.Fatalf("subscription reply: %+v", first)
	}
	adminOK(t, http.MethodPut, admin+"/registry/clusters/east", adminapi.RegistryClusterPut{Client: []string{"127.0.0.1:1"}})
	adminOK(t, http.MethodPut, admin+"/registry/namespaces/app", adminapi.RegistryNamespacePut{Cluster: "east", Secret: "app-secret"})
	var last *wire.RegistryTables
	for last == nil || len(last.Namespaces) == 0 {
		f, m, err := sub.read()
		if err != nil {
			t.Fatalf("waiting for pushes: %v", err)
		}
		if f.Type != wire.TypeRegistryChanged {
			t.Fatalf("unexpected %s", f.Type)
		}
		last = m.(*wire.RegistryTables)
	}
	if n := last.Namespaces[0]; n.Name != "app" || n.Cluster != "east" || n.Epoch != 1 || len(n.StoredKey) == 0 || last.Version <= first.Version {
		t.Fatalf("pushed tables: %+v", last)
	}
	again := dialRaw(t, addr)
	again.hello(testRegNS, testRegSecret, 3)
	testutil.EventuallyWith(t, 10*time.Second, func() (bool, string) {
		r, _ := again.callAny(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{Version: last.Version}).(*wire.RegistryTables)
		return r != nil && r.Unchanged && len(r.Namespaces) == 0, fmt.Sprintf("%+v", r)
	}, "a resubscription at the current version answered Unchanged")

	// Another node's replica (read as far as it has applied) comes to
	// the same tables.
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		resp, err := http.Get(admin + "/registry")
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "stored") || strings.Contains(string(body), "salt") {
			t.Fatalf("GET /registry shows a verifier: %s", body)
		}
		return strings.Contains(string(body), `"cluster":"east"`), string(body)
	}, "GET /registry shows the namespace")
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		code := adminDo(t, http.MethodDelete, admin+"/registry/clusters/east", nil)
		if code != http.StatusServiceUnavailable && code != http.StatusConflict {
			t.Fatalf("removing a cluster that serves a namespace: HTTP %d, want 409", code)
		}
		return code == http.StatusConflict, fmt.Sprintf("HTTP %d", code)
	}, "removing a cluster that serves a namespace refused (a 503 is a master change under way: retried)")
}

// startRegistry starts a registry process that takes its tables from
// the meta cluster.
func startRegistry(t *testing.T, meta []string) *registry.Standalone {
	t.Helper()
	return startRegistryWith(t, meta, nil)
}

// startRegistryWith is startRegistry with its configuration changed by
// tune.
func startRegistryWith(t *testing.T, meta []string, tune func(*registry.StandaloneConfig)) *registry.Standalone {
	t.Helper()
	cfg := registry.StandaloneConfig{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		Meta:              &registry.MetaConfig{Addrs: meta, Namespace: testRegNS, Secret: testRegSecret},
		HeartbeatInterval: 200 * time.Millisecond, RequestTimeout: time.Second,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		Logger: testLogger(),
	}
	if tune != nil {
		tune(&cfg)
	}
	r, err := registry.NewStandalone(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r
}

// TestRegistryFromMeta runs a meta cluster of three nodes, a lock
// cluster and two registry processes that take their tables from the
// meta cluster. A namespace added through the meta cluster's admin API
// authenticates through either registry without a restart, its
// verifier reaches the lock cluster with no secret copied by hand, and a
// client locks in it; stopping the registry the client uses does not
// stop the client; a registry cut from the meta cluster keeps serving
// its last tables and reports that it is disconnected.
func TestRegistryFromMeta(t *testing.T) {
	t.Parallel()
	meta := startMeta(t, 3)
	lock := startCluster(t, 1)
	metaAdmin := "http://" + meta.cfgs[0].Nodes[0].Admin
	adminOK(t, http.MethodPut, metaAdmin+"/registry/clusters/lock", adminapi.RegistryClusterPut{Client: lock.clientAddrs(), Admin: []string{lock.cfgs[0].AdminAddr}})
	r1 := startRegistry(t, meta.clientAddrs())
	r2 := startRegistry(t, meta.clientAddrs())

	adminOK(t, http.MethodPut, metaAdmin+"/registry/namespaces/app", adminapi.RegistryNamespacePut{Cluster: "lock", Secret: "app-secret"})
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		return lock.nodes[0].svc.HasNamespace("app"), "not yet"
	}, "the registry installs the namespace's verifier on its lock cluster")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := client.Config{Registry: []string{r1.Addr().String(), r2.Addr().String()}, Namespace: "app", Secret: "app-secret",
		Logger: testLogger(), RequestTimeout: 2 * time.Second, DialTimeout: time.Second, ViewRefresh: 500 * time.Millisecond}
	for _, r := range []*registry.Standalone{r2, r1} { // through either registry
		only := cfg
		only.Registry = []string{r.Addr().String()}
		var c *client.Client
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			var err error
			c, err = client.New(ctx, only)
			return err == nil, fmt.Sprint(err)
		}, "a client of the new namespace authenticates through %s", r.Addr())
		c.Close()
	}

	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lockKey := func(key string) {
		t.Helper()
		m := c.Mutex(key)
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("lock %s: %v", key, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("unlock %s: %v", key, err)
		}
	}
	lockKey("k1")
	if e := wire.ViewEpoch(c.View().Version); e != 1 {
		t.Fatalf("view version %#x: epoch %d, want 1", c.View().Version, e)
	}
	testutil.EventuallyWith(t, 10*time.Second, func() (bool, string) {
		st := r1.Status()
		return len(st) == 1 && st[0].Subscribers == 1, fmt.Sprintf("%+v", st)
	}, "the client subscribed at the first registry")

	// The namespace changes cluster (a second name for the same nodes):
	// its epoch rises and the registry pushes the new cluster's view to
	// the subscribed client at once, with a higher version.
	adminOK(t, http.MethodPut, metaAdmin+"/registry/clusters/lock-b", adminapi.RegistryClusterPut{Client: lock.clientAddrs(), Admin: []string{lock.cfgs[0].AdminAddr}})
	adminOK(t, http.MethodPut, metaAdmin+"/registry/namespaces/app", adminapi.RegistryNamespacePut{Cluster: "lock-b"})
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		v := c.View().Version
		return wire.ViewEpoch(v) == 2, fmt.Sprintf("version %#x", v)
	}, "the client is pushed the view of its namespace's new assignment")
	lockKey("k1")

	// The registry the client uses stops: the client fails over to the
	// other one and keeps locking.
	if err := r1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		sub := 0
		for _, st := range r2.Status() {
			sub += st.Subscribers
		}
		return sub >= 1, fmt.Sprintf("%+v", r2.Status())
	}, "the client subscribed at the other registry")
	lockKey("k2")

	// The meta cluster goes away: r2 serves its last tables and says so.
	for i := range meta.nodes {
		meta.stop(i)
	}
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		m := r2.Meta()
		return m.Configured && !m.Connected && m.Version > 0, fmt.Sprintf("%+v", m)
	}, "the registry reports the meta cluster disconnected")
	resp, err := http.Get("http://" + r2.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "paxlock_registry_meta_connected 0") {
		t.Fatalf("metrics without paxlock_registry_meta_connected 0:\n%s", body)
	}
	late := cfg
	late.Registry = []string{r2.Addr().String()}
	c2, err := client.New(ctx, late)
	if err != nil {
		t.Fatalf("a new client through the registry cut from meta: %v", err)
	}
	c2.Close()
	lockKey("k3")
}
