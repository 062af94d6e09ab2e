package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/server"
)

// TestCertsClient: certs client NAMESPACE issues client-NAMESPACE.crt and
// .key from the CA in -out, refuses to overwrite them, replaces them with
// -renew, and refuses a namespace that is not one (usage).
func TestCertsClient(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCtl(t, "", "certs", "-out", dir, "-nodes", "1"); code != 0 {
		t.Fatalf("certs: exit %d: %s", code, errOut)
	}
	code, out, errOut := runCtl(t, "", "certs", "client", "ops", "-out", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("certs client ops: exit %d: %s", code, errOut)
	}
	var f filesOutput
	want := []string{filepath.Join(dir, "client-ops.crt"), filepath.Join(dir, "client-ops.key")}
	if err := json.Unmarshal([]byte(out), &f); err != nil || strings.Join(f.Wrote, ",") != strings.Join(want, ",") {
		t.Fatalf("certs client ops -o json printed %q (%v)", out, err)
	}
	if code, _, errOut := runCtl(t, "", "certs", "client", "ops", "-out", dir); code == 0 || !strings.Contains(errOut, "not overwriting") {
		t.Fatalf("certs client ops again: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCtl(t, "", "certs", "client", "ops", "-renew", "-out", dir); code != 0 {
		t.Fatalf("certs client ops -renew: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"certs", "client"}, {"certs", "client", "a/b"}, {"certs", "client", "a", "b"}} {
		if code, _, _ := runCtl(t, "", append(args, "-out", dir)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
	if code, _, errOut := runCtl(t, "", "certs", "client", "ops", "-out", t.TempDir()); code != 1 || !strings.Contains(errOut, "ca") {
		t.Errorf("certs client without a CA: exit %d: %s", code, errOut)
	}
}

// TestClientCertFlags: against a node whose TLS client listener requires
// client certificates bound to namespaces, state with -ca, -cert and -key
// of namespace ops's certificate works; without -cert and -key, or with
// another namespace's certificate, it fails; -cert without -key is a
// usage error.
func TestClientCertFlags(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCtl(t, "", "certs", "-out", dir, "-nodes", "1"); code != 0 {
		t.Fatalf("certs: exit %d: %s", code, errOut)
	}
	for _, ns := range []string{"ops", "dev"} {
		if code, _, errOut := runCtl(t, "", "certs", "client", ns, "-out", dir); code != 0 {
			t.Fatalf("certs client %s: exit %d: %s", ns, code, errOut)
		}
	}
	a := freeAddrs(t, 4)
	ca := filepath.Join(dir, pki.DevCACert)
	cfg := server.Config{
		NodeID:     1,
		Nodes:      []server.NodeAddr{{ID: 1, Peer: a[0], Client: a[1], Gossip: a[2], ClientTLS: a[3]}},
		DataDir:    t.TempDir(),
		Namespaces: []server.Namespace{{Name: "ops", Secret: "ops-secret"}, {Name: "dev", Secret: "ops-secret"}},
		Groups:     3,
		Lease:      server.Duration(500 * time.Millisecond),
		Heartbeat:  server.Duration(50 * time.Millisecond),
		TLS:        &pki.Files{CA: ca, Cert: filepath.Join(dir, pki.DevNodeCert(1)), Key: filepath.Join(dir, pki.DevNodeKey(1))},
		ClientTLS:  &server.ClientTLS{ClientCA: ca, ClientAuth: server.ClientAuthRequired, BindNamespace: true},
	}
	srv := runNode(t, cfg)
	t.Setenv(SecretEnv, "ops-secret")
	state := func(extra ...string) (int, string) {
		args := append([]string{"state", "k", "-registry", srv.ClientTLSAddr(), "-namespace", "ops", "-ca", ca, "-timeout", "3s"}, extra...)
		code, _, errOut := runCtl(t, "", args...)
		return code, errOut
	}
	if code, errOut := state("-cert", filepath.Join(dir, "client-ops.crt"), "-key", filepath.Join(dir, "client-ops.key")); code != 0 {
		t.Fatalf("state with ops's certificate: exit %d: %s", code, errOut)
	}
	if code, _ := state(); code == 0 {
		t.Error("state without a client certificate succeeded")
	}
	if code, _ := state("-cert", filepath.Join(dir, "client-dev.crt"), "-key", filepath.Join(dir, "client-dev.key")); code == 0 {
		t.Error("state in ops with dev's certificate succeeded")
	}
	if code, _ := state("-cert", filepath.Join(dir, "client-ops.crt")); code != 2 {
		t.Errorf("-cert without -key: exit %d, want 2 (usage)", code)
	}
}
