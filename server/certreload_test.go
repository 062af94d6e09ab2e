package server

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
)

// TestCertificateReload: a node renewed with paxlockctl certs node ID
// -renew presents the renewed certificate on its TLS client listener
// without a restart, and /metrics reports the renewed certificate's
// expiry.
func TestCertificateReload(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 1)
	s := tc.nodes[0]
	expiry := func() float64 {
		return sumOf(scrape(t, s.cfg.AdminAddr), "paxlock_tls_certificate_expiry_timestamp_seconds", map[string]string{"use": "peer"})
	}
	presented := func() time.Time {
		rc := dialRawTLS(t, s.cfg.self().ClientTLS, clientTLS(t, dir))
		defer rc.c.Close()
		tc, ok := rc.c.(*tls.Conn)
		if !ok {
			t.Fatalf("connection %T", rc.c)
		}
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc.ConnectionState().PeerCertificates[0].NotAfter
	}
	before := presented()
	if got := expiry(); got != float64(before.Unix()) {
		t.Fatalf("expiry metric %v, want %v", got, before.Unix())
	}
	if _, err := pki.WriteNode(dir, pki.NodeOptions{Cluster: "paxlock", ID: 1, Hosts: []string{"127.0.0.1"}, Renew: true, Validity: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// The node looks at its files every pki.ReloadInterval; look now.
	if err := s.sec.peer.Reload(); err != nil {
		t.Fatal(err)
	}
	after := presented()
	if !after.Before(before) || time.Until(after) > 31*24*time.Hour {
		t.Fatalf("certificate presented after the renewal expires %v (before: %v), want the 30-day renewal", after, before)
	}
	if got := expiry(); got != float64(after.Unix()) {
		t.Fatalf("expiry metric %v after the renewal, want %v", got, after.Unix())
	}
}

// TestClusterCARotation: the cluster CA is replaced without restarting
// any node for it. The CA file first holds the old and the new CA, the
// nodes' certificates are renewed from the new one, then the file holds
// the new CA alone; each step is picked up by every node (Reload: what
// pki.ReloadInterval does within 10 s). A node restarted afterwards (new
// peer handshakes with its renewed certificate, against pools that trust
// only the new CA) rejoins, and relays a client's request to the master
// through the master's TLS client listener, where it is recognised as a
// node by the new CA alone.
func TestClusterCARotation(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 3)
	oldPEM, err := os.ReadFile(filepath.Join(dir, pki.DevCACert))
	if err != nil {
		t.Fatal(err)
	}
	next, err := pki.NewCA("paxlock CA (next)", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reloadAll := func(step string) {
		t.Helper()
		for _, s := range tc.nodes {
			if err := s.sec.peer.Reload(); err != nil {
				t.Fatalf("%s: node %d: %v", step, s.cfg.NodeID, err)
			}
		}
	}
	write(pki.DevCACert, append(append([]byte(nil), oldPEM...), next.CertPEM...))
	reloadAll("both CAs")
	for _, s := range tc.nodes {
		is, err := next.IssueNode("paxlock", s.cfg.NodeID, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		write(pki.DevNodeKey(int(s.cfg.NodeID)), is.KeyPEM)
		write(pki.DevNodeCert(int(s.cfg.NodeID)), is.CertPEM)
	}
	reloadAll("renewed certificates")
	write(pki.DevCACert, next.CertPEM)
	reloadAll("the new CA alone")

	const key = "rotated"
	mi := tc.masterIndex("ns", key)
	vi := (mi + 1) % 3
	tc.stop(vi)
	tc.start(vi)
	tc.waitMemberList(3)
	newTrust := &tls.Config{RootCAs: next.Pool(), MinVersion: tls.VersionTLS12}
	mi = tc.masterIndex("ns", key)
	via := tc.cfgs[(mi+1)%3].self()
	rc := dialRawTLS(t, via.ClientTLS, newTrust)
	if r := rc.hello("ns", "s3cret", 5); r.Status != wire.StatusSuccess {
		t.Fatalf("hello through a node with a renewed certificate: %+v", r)
	}
	r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(5), ID: 1}, Weight: 1, TTLMs: 10000, Redirects: wire.ForwardNow})
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("acquire relayed after the rotation: %+v", r)
	}
}
