package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
)

// TestSecureCluster runs a 3-node cluster with everything make run turns
// on: peer mTLS, encrypted gossip, admin HTTPS with the node certificates
// and a bearer token. The cluster becoming ready proves that Paxos and
// gossip work over them; then every protected admin endpoint answers 401
// without the token (or with a wrong one) and works with it, while
// /healthz and /readyz need none.
func TestSecureCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := pki.WriteDev(dir, pki.DevOptions{Cluster: "paxlock", Nodes: 3, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	tc, token, cl := startSecureAdminCluster(t, dir, func(c *Config) {
		c.GossipKeyFile = filepath.Join(dir, pki.DevGossipKey)
		c.FaultInjection = true
	})
	base := "https://" + tc.cfgs[0].AdminAddr
	call := func(method, path, bearer, body string) (*http.Response, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if method != http.MethodGet {
			req.Header.Set("Content-Type", "application/json")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end
		return resp, string(b)
	}
	protected := []struct {
		method, path, body string
		ok                 int
	}{
		{http.MethodGet, "/status", "", http.StatusOK},
		{http.MethodGet, "/metrics", "", http.StatusOK},
		{http.MethodGet, "/namespaces", "", http.StatusOK},
		{http.MethodPost, "/namespaces", `{"name":"added","secret":"pw"}`, http.StatusNoContent},
		{http.MethodDelete, "/namespaces?name=added", "", http.StatusNoContent},
		{http.MethodGet, "/debug/pprof/", "", http.StatusOK},
		{http.MethodGet, "/debug/pprof/symbol", "", http.StatusOK},
		{http.MethodGet, "/debug/partition", "", http.StatusOK},
		{http.MethodPost, "/debug/partition?cut=", "", http.StatusOK},
	}
	for _, p := range protected {
		for _, bad := range []string{"", "wrong-" + token} {
			resp, _ := call(p.method, p.path, bad, p.body)
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s with token %q: %s (WWW-Authenticate %q), want 401 with a Bearer challenge", p.method, p.path, bad, resp.Status, resp.Header.Get("WWW-Authenticate"))
			}
		}
		resp, body := call(p.method, p.path, token, p.body)
		if resp.StatusCode == http.StatusServiceUnavailable && strings.HasPrefix(p.path, "/namespaces") && p.method != http.MethodGet {
			// The namespace table's master is changing (placement moves
			// groups after start): retry, as paxlockctl does.
			waitFor(t, p.method+" "+p.path+" once the namespace table has a master", func() bool {
				resp, body = call(p.method, p.path, token, p.body)
				return resp.StatusCode != http.StatusServiceUnavailable
			})
		}
		if resp.StatusCode != p.ok {
			t.Errorf("%s %s with the token: %s %q, want %d", p.method, p.path, resp.Status, body, p.ok)
		}
	}
	// Health and readiness answer without the token. Readiness can dip
	// while a group changes master (placement hands groups over after the
	// partition above is healed), so it is awaited; a 401 fails at once.
	for _, path := range []string{"/healthz", "/readyz"} {
		waitFor(t, path+" without the token to answer 200", func() bool {
			resp, _ := call(http.MethodGet, path, "", "")
			if resp.StatusCode == http.StatusUnauthorized {
				t.Fatalf("%s without the token: %s, want it public", path, resp.Status)
			}
			return resp.StatusCode == http.StatusOK
		})
	}
	// Plain HTTP to the HTTPS admin port gets nothing useful.
	if code, _, err := adminGet(t, tc.cfgs[0].AdminAddr, "/status"); err == nil && code == http.StatusOK {
		t.Error("plain HTTP /status answered 200 on the HTTPS admin port")
	}
	if n := tc.nodes[0].tr.Stats().Refused; n != 0 {
		t.Errorf("node 1 refused %d peer connections of its own cluster", n)
	}
}

// TestConfigSecurityErrors: bad security settings are refused at load.
func TestConfigSecurityErrors(t *testing.T) {
	base := func() Config {
		return Config{NodeID: 1, DataDir: "d", Nodes: []NodeAddr{{ID: 1, Peer: "a:1", Client: "a:2"}}}
	}
	for name, tune := range map[string]func(*Config){
		"tls without key":             func(c *Config) { c.TLS = &pki.Files{CA: "ca", Cert: "c"} },
		"tls with a bad cluster name": func(c *Config) { c.TLS = &pki.Files{CA: "ca", Cert: "c", Key: "k"}; c.ClusterName = "a b" },
		"admin_tls half set":          func(c *Config) { c.AdminTLS = &AdminTLS{Cert: "c"} },
		"admin_tls without tls":       func(c *Config) { c.AdminTLS = &AdminTLS{} },
		"short gossip key":            func(c *Config) { c.GossipKey = "c2hvcnQ=" },
		"gossip key twice":            func(c *Config) { c.GossipKey = strings.Repeat("A", 44); c.GossipKeyFile = "f" },
		"old keys without a key":      func(c *Config) { c.GossipOldKeys = []string{strings.Repeat("A", 44)} },
		"missing token file":          func(c *Config) { c.AdminTokenFile = "/nonexistent/token" },
		"client_tls_addr without tls": func(c *Config) { c.Nodes[0].ClientTLS = "a:3" },
		"missing relay secret file":   func(c *Config) { c.RelaySecretFile = "/nonexistent/relay.secret" },
		"short relay secret":          func(c *Config) { c.RelaySecretFile = writeRelaySecret(t, "too-short") },
	} {
		c := base()
		tune(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: Check accepted it", name)
		}
	}
	c := base()
	c.GossipKey = strings.Repeat("A", 43) + "="
	c.GossipOldKeys = []string{strings.Repeat("B", 43) + "="}
	if err := c.Check(); err != nil {
		t.Fatalf("good gossip keys: %v", err)
	}
	keys, err := c.gossipKeys()
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 {
		t.Fatalf("gossipKeys = %d keys, %v", len(keys), err)
	}
	if s := fmt.Sprint(c.LogValue()); strings.Contains(s, c.GossipKey) || strings.Contains(s, c.GossipOldKeys[0]) {
		t.Fatalf("LogValue shows a gossip key: %s", s)
	}

	// The relay secret: from its file, or from the environment first.
	c = base()
	c.RelaySecretFile = writeRelaySecret(t, testRelaySecret)
	t.Setenv(RelaySecretEnv, "")
	if sec, err := c.relaySecret(); err != nil || sec != testRelaySecret {
		t.Fatalf("relay secret from its file: %q, %v", sec, err)
	}
	t.Setenv(RelaySecretEnv, "relay-secret-from-the-environment")
	if sec, err := c.relaySecret(); err != nil || sec != "relay-secret-from-the-environment" {
		t.Fatalf("relay secret from %s: %q, %v", RelaySecretEnv, sec, err)
	}
	t.Setenv(RelaySecretEnv, "short")
	if err := c.Check(); err == nil {
		t.Fatalf("Check accepted a %s of 5 bytes", RelaySecretEnv)
	}
}

// startSecureAdminCluster starts a 3-node cluster with the development PKI
// in dir (which must hold pki.WriteDev's files): peer mTLS, admin HTTPS
// with the node certificates and the token file. tune adds to each node's
// configuration. It returns the cluster, the admin token and an HTTPS
// client that trusts the development CA (its idle connections closed at
// the end of the test).
func startSecureAdminCluster(t *testing.T, dir string, tune func(*Config)) (*testCluster, string, *http.Client) {
	t.Helper()
	tc := startClusterWith(t, 3, func(c *Config) {
		c.TLS = &pki.Files{CA: filepath.Join(dir, pki.DevCACert), Cert: filepath.Join(dir, pki.DevNodeCert(int(c.NodeID))), Key: filepath.Join(dir, pki.DevNodeKey(int(c.NodeID)))}
		c.AdminTLS = &AdminTLS{}
		c.AdminTokenFile = filepath.Join(dir, pki.DevAdminToken)
		if tune != nil {
			tune(c)
		}
	})
	tok, err := os.ReadFile(filepath.Join(dir, pki.DevAdminToken))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.LoadCAPool(filepath.Join(dir, pki.DevCACert))
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: 15 * time.Second}
	t.Cleanup(cl.CloseIdleConnections)
	return tc, strings.TrimSpace(string(tok)), cl
}
