package server

import (
	"crypto/tls"
	"testing"
	"time"

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
