package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCAPoolReload: a pool read from two files verifies certificates of
// the CAs both hold; once one file is rewritten with another CA, Reload
// makes the pool verify that CA's certificates and no longer the one it
// replaced, while the other file's CA stays trusted; a rewrite with no
// PEM certificate is refused with an error and the pool in use stays.
func TestCAPoolReload(t *testing.T) {
	t.Parallel()
	newCA := func(name string) *CA {
		ca, err := NewCA(name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	clientsA, clientsB, cluster := newCA("clients A"), newCA("clients B"), newCA("cluster")
	dir := t.TempDir()
	clientFile, clusterFile := filepath.Join(dir, "client-ca.crt"), filepath.Join(dir, "ca.crt")
	write := func(path string, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(clientFile, clientsA.CertPEM)
	write(clusterFile, cluster.CertPEM)
	leafOf := func(ca *CA) *x509.Certificate {
		is, err := ca.IssueClient("ns", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c, err := is.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf
	}
	fromA, fromB, fromCluster := leafOf(clientsA), leafOf(clientsB), leafOf(cluster)
	verifies := func(p *CAPool, leaf *x509.Certificate) bool {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: p.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}

	p, err := LoadCAPools(clientFile, clusterFile)
	if err != nil {
		t.Fatal(err)
	}
	if !verifies(p, fromA) || !verifies(p, fromCluster) || verifies(p, fromB) {
		t.Fatalf("first load: A %v, cluster %v, B %v; want true, true, false", verifies(p, fromA), verifies(p, fromCluster), verifies(p, fromB))
	}

	write(clientFile, clientsB.CertPEM)
	if err := p.Reload(); err != nil {
		t.Fatal(err)
	}
	if verifies(p, fromA) || !verifies(p, fromCluster) || !verifies(p, fromB) {
		t.Fatalf("after the rotation: A %v, cluster %v, B %v; want false, true, true", verifies(p, fromA), verifies(p, fromCluster), verifies(p, fromB))
	}

	write(clientFile, []byte("not a certificate\n"))
	if err := p.Reload(); err == nil {
		t.Fatal("a client_ca file without a certificate was loaded")
	}
	if !verifies(p, fromB) || !verifies(p, fromCluster) {
		t.Fatal("the pool in use changed after a refused reload")
	}

	if _, err := LoadCAPools(clientFile, clusterFile); err == nil {
		t.Fatal("LoadCAPools accepted a file without a certificate")
	}
	if _, err := LoadCAPools(); err == nil {
		t.Fatal("LoadCAPools accepted no file")
	}
}
