package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/api/paxlock/v1/paxlockv1connect"
	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/server"
)

// TestTLSBoundCertificate: a node with a certificate serves the API over
// TLS only (HTTP/2 offered), and under client_tls bind_namespace a caller
// with the right secret is refused without a client certificate naming
// its namespace, and served with one.
func TestTLSBoundCertificate(t *testing.T) {
	// Not parallel: its node runs before the shared cluster starts.
	c, err := startCluster(1, func(dir string, cfg *server.Config) {
		if _, err := pki.WriteDev(dir, pki.DevOptions{Cluster: "paxlock", Nodes: 1, Hosts: []string{"127.0.0.1"}}); err != nil {
			t.Fatal(err)
		}
		cfg.TLS = &pki.Files{CA: filepath.Join(dir, pki.DevCACert), Cert: filepath.Join(dir, pki.DevNodeCert(1)), Key: filepath.Join(dir, pki.DevNodeKey(1))}
		cfg.ClientTLS = &server.ClientTLS{ClientCA: filepath.Join(dir, pki.DevCACert), ClientAuth: server.ClientAuthOptional, BindNamespace: true}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	pem, err := os.ReadFile(filepath.Join(c.dir, pki.DevCACert))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	ca, err := pki.LoadCA(filepath.Join(c.dir, pki.DevCACert), filepath.Join(c.dir, pki.DevCAKey))
	if err != nil {
		t.Fatal(err)
	}
	clientFor := func(certNS string) paxlockv1connect.LockServiceClient {
		conf := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if certNS != "" {
			is, err := ca.IssueClient(certNS, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := is.TLSCertificate()
			if err != nil {
				t.Fatal(err)
			}
			conf.Certificates = []tls.Certificate{cert}
		}
		tr := &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}
		hc := &http.Client{Transport: basicAuth{ns: testNS, secret: testSecret, next: tr}}
		return paxlockv1connect.NewLockServiceClient(hc, "https://"+c.apis[0].Addr(), connect.WithGRPC())
	}
	ctx := tctx(t)
	for _, certNS := range []string{"", "other"} {
		_, err := acquire(ctx, clientFor(certNS), &paxlockv1.AcquireRequest{Key: "tls", Owner: "o"})
		if codeOfErr(err) != connect.CodeUnauthenticated {
			t.Fatalf("client certificate for %q: %v, want UNAUTHENTICATED", certNS, err)
		}
	}
	cl := clientFor(testNS)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "tls", Owner: "o"})
	if err != nil {
		t.Fatalf("gRPC over TLS with the namespace's certificate: %v", err)
	}
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "tls", Owner: "o", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	plain := c.client(0, testNS, testSecret)
	if _, err := acquire(ctx, plain, &paxlockv1.AcquireRequest{Key: "tls", Owner: "o"}); err == nil {
		t.Fatal("plaintext HTTP to the TLS listener served")
	}
}
