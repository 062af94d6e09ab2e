package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
)

// clientCertTLS is clientTLS presenting a client certificate for
// namespace ns issued by the CA in dir.
func clientCertTLS(t testing.TB, dir, ns string) *tls.Config {
	t.Helper()
	ca, err := pki.LoadCA(filepath.Join(dir, pki.DevCACert), filepath.Join(dir, pki.DevCAKey))
	if err != nil {
		t.Fatal(err)
	}
	return withIssued(t, clientTLS(t, dir), ca, ns)
}

// withIssued is conf presenting a client certificate for namespace ns
// issued by ca.
func withIssued(t testing.TB, conf *tls.Config, ca *pki.CA, ns string) *tls.Config {
	t.Helper()
	is, err := ca.IssueClient(ns, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := is.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	conf.Certificates = []tls.Certificate{cert}
	return conf
}

// clientCerts sets a cluster's client_tls section: client certificates
// from the development CA in dir, with the given policy.
func clientCerts(dir, auth string, bind bool) func(*Config) {
	return func(c *Config) {
		c.ClientTLS = &ClientTLS{ClientCA: filepath.Join(dir, pki.DevCACert), ClientAuth: auth, BindNamespace: bind}
	}
}

// refusedAtHandshake reports whether the TLS client listener at addr
// refuses a connection configured with conf: the handshake fails, or
// (TLS 1.3, where the client's side ends before the server checks its
// certificate) the first read does, at once rather than by timing out.
func refusedAtHandshake(t *testing.T, addr string, conf *tls.Config) bool {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: conf}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return true
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := wire.AppendFrame(nil, wire.TypeHeartbeat, 1, &wire.Heartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		return true
	}
	_, err = c.Read(make([]byte, 64))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestClientCertRequired: with client_auth "required" (and
// bind_namespace), a client presenting a certificate for its namespace
// from client_ca locks through the TLS client listeners, and a node
// relays its request to the master with the node's own certificate; a
// client without a certificate, or with one from another CA, is refused
// at the handshake.
func TestClientCertRequired(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 3, func(c *Config) {
		clientCerts(filepath.Dir(c.TLS.CA), ClientAuthRequired, true)(c)
	})
	var tlsAddrs []string
	for _, n := range tc.cfgs[0].Nodes {
		tlsAddrs = append(tlsAddrs, n.ClientTLS)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := client.New(ctx, client.Config{Registry: tlsAddrs, TLS: clientCertTLS(t, dir, "ns"), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: testMaxRetries})
	if err != nil {
		t.Fatalf("New with a client certificate: %v", err)
	}
	for _, key := range []string{"a", "b", "c", "d", "e"} { // several groups, so several masters
		m := c.Mutex("cert-" + key)
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("Lock %s: %v", key, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %s: %v", key, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// A node that is not the master relays over the master's TLS client
	// listener, which requires a certificate: its node certificate.
	const key = "relayed-cert"
	mi := tc.masterIndex("ns", key)
	via := tc.cfgs[(mi+1)%3].self()
	rc := dialRawTLS(t, via.ClientTLS, clientCertTLS(t, dir, "ns"))
	if r := rc.hello("ns", "s3cret", 3); r.Status != wire.StatusSuccess {
		t.Fatalf("hello with a client certificate: %+v", r)
	}
	owner := wire.Owner{Client: cid(3), ID: 1}
	r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: owner, Weight: 1, TTLMs: 10000, Redirects: wire.ForwardNow})
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("acquire through a relay: %+v", r)
	}

	if !refusedAtHandshake(t, tlsAddrs[0], clientTLS(t, dir)) {
		t.Fatal("a client without a certificate was served")
	}
	foreign, err := pki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !refusedAtHandshake(t, tlsAddrs[0], withIssued(t, clientTLS(t, dir), foreign, "ns")) {
		t.Fatal("a client with a certificate from another CA was served")
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if c, err := client.New(short, client.Config{Registry: tlsAddrs[:1], TLS: clientTLS(t, dir), Namespace: "ns", Secret: "s3cret", Logger: testLogger()}); err == nil {
		_ = c.Close()
		t.Fatal("a client without a certificate connected")
	}
}

// TestClientCertBindNamespace: with bind_namespace, a session for a
// namespace needs both a verified client certificate naming it and the
// namespace's secret: a certificate for one namespace does not open
// another, the secret is still checked, and a connection without a
// certificate naming the namespace (no certificate, a node's, or the
// plain client port) is refused AUTH_FAILED.
func TestClientCertBindNamespace(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 1, func(c *Config) {
		clientCerts(filepath.Dir(c.TLS.CA), ClientAuthOptional, true)(c)
	})
	self := tc.cfgs[0].self()
	nodeCert, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.DevNodeCert(1)), filepath.Join(dir, pki.DevNodeKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	asNode := clientTLS(t, dir)
	asNode.Certificates = []tls.Certificate{nodeCert}
	for _, tt := range []struct {
		name       string
		conf       *tls.Config // nil: the plain client port
		ns, secret string
		want       wire.Status
	}{
		{"its namespace", clientCertTLS(t, dir, "ns"), "ns", "s3cret", wire.StatusSuccess},
		{"another namespace", clientCertTLS(t, dir, "ns"), "other", "x", wire.StatusAuthFailed},
		{"a wrong secret", clientCertTLS(t, dir, "ns"), "ns", "wrong", wire.StatusAuthFailed},
		{"no certificate", clientTLS(t, dir), "ns", "s3cret", wire.StatusAuthFailed},
		{"a node's certificate", asNode, "ns", "s3cret", wire.StatusAuthFailed},
		{"the plain port", nil, "ns", "s3cret", wire.StatusAuthFailed},
		{"the other namespace's certificate", clientCertTLS(t, dir, "other"), "other", "x", wire.StatusSuccess},
	} {
		var rc *rawConn
		if tt.conf == nil {
			rc = dialRaw(t, self.Client)
		} else {
			rc = dialRawTLS(t, self.ClientTLS, tt.conf)
		}
		if r := rc.hello(tt.ns, tt.secret, 5); r.Status != tt.want {
			t.Errorf("%s: hello %s: %+v, want %v", tt.name, tt.ns, r, tt.want)
		}
	}
}

// TestClientTLSConfigErrors: the client_tls section is checked before a
// node starts, with errors that name what is wrong.
func TestClientTLSConfigErrors(t *testing.T) {
	t.Parallel()
	base := func(ct *ClientTLS, tlsAddr string) Config {
		c := Config{NodeID: 1, DataDir: t.TempDir(), ClientTLS: ct,
			Nodes: []NodeAddr{{ID: 1, Peer: "127.0.0.1:1", Client: "127.0.0.1:2", ClientTLS: tlsAddr}}}
		c.EnsureDefaults()
		return c
	}
	for _, tt := range []struct {
		ct      *ClientTLS
		tlsAddr string
		want    string
	}{
		{&ClientTLS{ClientAuth: ClientAuthRequired}, "127.0.0.1:3", "needs client_ca"},
		{&ClientTLS{ClientAuth: ClientAuthOptional}, "127.0.0.1:3", "needs client_ca"},
		{&ClientTLS{ClientCA: "ca.crt", ClientAuth: "always"}, "127.0.0.1:3", `client_auth "always" is none of`},
		{&ClientTLS{ClientCA: "ca.crt", ClientAuth: ClientAuthRequired}, "", "no client_tls_addr"},
		{&ClientTLS{ClientCA: "ca.crt", BindNamespace: true}, "127.0.0.1:3", "bind_namespace needs client_auth"},
	} {
		c := base(tt.ct, tt.tlsAddr)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", *tt.ct, err, tt.want)
		}
	}
	c := base(&ClientTLS{ClientCA: "ca.crt", ClientAuth: ClientAuthRequired}, "127.0.0.1:3")
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "client_tls:") {
		t.Errorf("a valid client_tls section: %v (want only the missing tls section)", err)
	}
	var d Config
	if err := DecodeStrict([]byte(`{"client_tls": {"client_ca": "ca.crt", "client_auth": "required", "bind_namespace": true}}`), &d); err != nil || d.ClientTLS == nil || !d.ClientTLS.BindNamespace {
		t.Errorf("decoding client_tls: %+v, %v", d.ClientTLS, err)
	}
}

// TestClientCAVouchesForNoNode: a client_ca other than the cluster CA
// signs clients' certificates only: a certificate from it that names a
// node of the cluster is not taken for that node's, so its relay Hello
// is refused, while a client certificate from it opens a session.
func TestClientCAVouchesForNoNode(t *testing.T) {
	t.Parallel()
	other := t.TempDir()
	if _, err := pki.WriteDev(other, pki.DevOptions{Cluster: "paxlock", Nodes: 2}); err != nil {
		t.Fatal(err)
	}
	tc, dir := startSecureCluster(t, 1, clientCerts(other, ClientAuthRequired, false))
	self := tc.cfgs[0].self()
	forged, err := tls.LoadX509KeyPair(filepath.Join(other, pki.DevNodeCert(2)), filepath.Join(other, pki.DevNodeKey(2)))
	if err != nil {
		t.Fatal(err)
	}
	conf := clientTLS(t, dir)
	conf.Certificates = []tls.Certificate{forged}
	hello := &wire.Hello{Namespace: "ns", ClientID: cid(11), ClientKey: testKey(11), Via: 2}
	if r := dialRawTLS(t, self.ClientTLS, conf).call(wire.TypeHello, hello); r.Status != wire.StatusAuthFailed {
		t.Fatalf("a relay Hello with a node certificate from client_ca: %+v", r)
	}
	ca, err := pki.LoadCA(filepath.Join(other, pki.DevCACert), filepath.Join(other, pki.DevCAKey))
	if err != nil {
		t.Fatal(err)
	}
	if r := dialRawTLS(t, self.ClientTLS, withIssued(t, clientTLS(t, dir), ca, "ns")).hello("ns", "s3cret", 12); r.Status != wire.StatusSuccess {
		t.Fatalf("hello with a client certificate from client_ca: %+v", r)
	}
}

// TestClientCARotation: the TLS client listener takes a changed client_ca
// file without a restart. With client_auth "required" and client_ca
// holding CA A, a client certificate from A is served and one from B
// refused at the handshake; once the file holds B instead (and the node
// has looked at it: pki.ReloadInterval, here at once), B's is served and
// A's refused. A file rewritten without a certificate is refused and the
// pool in use stays.
func TestClientCARotation(t *testing.T) {
	t.Parallel()
	newCA := func(name string) *pki.CA {
		ca, err := pki.NewCA(name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	caA, caB := newCA("clients A"), newCA("clients B")
	var clientCA string
	tc, dir := startSecureCluster(t, 1, func(c *Config) {
		clientCA = filepath.Join(filepath.Dir(c.TLS.CA), "client-ca.crt")
		if err := os.WriteFile(clientCA, caA.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		c.ClientTLS = &ClientTLS{ClientCA: clientCA, ClientAuth: ClientAuthRequired}
	})
	s := tc.nodes[0]
	addr := s.cfg.self().ClientTLS
	served := func(ca *pki.CA) bool {
		t.Helper()
		conf := withIssued(t, clientTLS(t, dir), ca, "ns")
		if refusedAtHandshake(t, addr, conf) {
			return false
		}
		rc := dialRawTLS(t, addr, conf)
		defer rc.c.Close()
		if r := rc.hello("ns", "s3cret", 7); r.Status != wire.StatusSuccess {
			t.Fatalf("hello with a certificate from %s: %+v", ca.Cert.Subject.CommonName, r)
		}
		return true
	}
	if !served(caA) || served(caB) {
		t.Fatal("before the rotation: want A's certificate served and B's refused")
	}

	if err := os.WriteFile(clientCA, caB.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.sec.clientCAs.Reload(); err != nil {
		t.Fatal(err)
	}
	if served(caA) || !served(caB) {
		t.Fatal("after the rotation: want B's certificate served and A's refused")
	}

	if err := os.WriteFile(clientCA, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.sec.clientCAs.Reload(); err == nil {
		t.Fatal("a client_ca file without a certificate was loaded")
	}
	if !served(caB) {
		t.Fatal("a refused reload changed the pool in use")
	}
}
