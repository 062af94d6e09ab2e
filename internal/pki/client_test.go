package pki

import (
	"crypto/x509"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestIssueClient issues a client certificate for a namespace: it
// verifies against the CA for client use only, names the namespace as
// paxlock-client:<ns> (case and dots kept), and names no node.
func TestIssueClient(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"demo", "Team_A", "a..b", "."} {
		is, err := ca.IssueClient(ns, time.Hour)
		if err != nil {
			t.Fatal(ns, err)
		}
		c, err := is.TLSCertificate()
		if err != nil {
			t.Fatal(ns, err)
		}
		leaf := c.Leaf
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("%s: client use: %v", ns, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Fatalf("%s: a client certificate verifies for server use", ns)
		}
		if got := ClientNamespaces(leaf); !slices.Equal(got, []string{ns}) {
			t.Fatalf("%s: namespaces %v", ns, got)
		}
		if _, _, err := NodeIdentity(leaf); err == nil {
			t.Fatalf("%s: a client certificate names a node", ns)
		}
	}
	for _, ns := range []string{"", "a b", "ns/x"} {
		if _, err := ca.IssueClient(ns, time.Hour); err == nil {
			t.Errorf("namespace %q issued", ns)
		}
	}
	if _, err := ca.IssueClient("demo", 0); err == nil {
		t.Error("validity 0 issued")
	}
	node, err := ca.IssueNode("prod", 1, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := node.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if got := ClientNamespaces(nc.Leaf); got != nil {
		t.Errorf("a node certificate names namespaces %v", got)
	}
	odd := &x509.Certificate{URIs: []*url.URL{{Scheme: ClientScheme, Host: "demo"}, {Scheme: ClientScheme, Opaque: "bad ns"}, {Scheme: ClientScheme, Opaque: "ok"}}}
	if got := ClientNamespaces(odd); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("namespaces of odd URIs %v", got)
	}
}

// TestWriteClient writes a client certificate from the CA WriteDev made:
// it chains to that CA, its key has mode 0600, and a second issue refuses
// to overwrite it unless renewing.
func TestWriteClient(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := WriteDev(dir, DevOptions{Cluster: "prod", Nodes: 1}); err != nil {
		t.Fatal(err)
	}
	files, err := WriteClient(dir, ClientOptions{Namespace: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "client-orders.crt"), filepath.Join(dir, "client-orders.key")}
	if !slices.Equal(files, want) {
		t.Fatalf("wrote %v, want %v", files, want)
	}
	if fi, err := os.Stat(want[1]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key: %v %v", fi, err)
	}
	pool, err := LoadCAPool(filepath.Join(dir, DevCACert))
	if err != nil {
		t.Fatal(err)
	}
	is := readIssued(t, want[0], want[1])
	c, err := is.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteClient(dir, ClientOptions{Namespace: "orders"}); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Fatalf("a second issue: %v", err)
	}
	if _, err := WriteClient(dir, ClientOptions{Namespace: "orders", Renew: true}); err != nil {
		t.Fatal(err)
	}
	renewed, err := readIssued(t, want[0], want[1]).TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Leaf.SerialNumber.Cmp(c.Leaf.SerialNumber) == 0 {
		t.Error("the renewed certificate has the old serial")
	}
	if _, err := WriteClient(dir, ClientOptions{Namespace: "../x"}); err == nil {
		t.Error("namespace ../x written")
	}
	if _, err := WriteClient(t.TempDir(), ClientOptions{Namespace: "orders"}); err == nil {
		t.Error("written without a CA")
	}
}

func readIssued(t *testing.T, certPath, keyPath string) Issued {
	t.Helper()
	cb, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return Issued{CertPEM: cb, KeyPEM: kb}
}
