package pki

import (
	"crypto/tls"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// serialSeen dials addr with conf and returns the serial of the
// certificate the server presented.
func serialSeen(t *testing.T, addr string, conf *tls.Config) *big.Int {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestPeerReloadsRenewedCertificate: a node's peer listener presents
// certificate A; once the files hold a renewed certificate B, a new
// handshake presents B — found by the next look once the interval has
// passed, or at once by Reload — and the material in use says so. A
// renewal that does not load (a certificate without its key) is refused
// and B stays; so is a certificate of another node.
func TestPeerReloadsRenewedCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := WriteDev(dir, DevOptions{Cluster: "c", Nodes: 2}); err != nil {
		t.Fatal(err)
	}
	files := func(id int) Files {
		return Files{CA: filepath.Join(dir, DevCACert), Cert: filepath.Join(dir, DevNodeCert(id)), Key: filepath.Join(dir, DevNodeKey(id))}
	}
	p1, err := LoadPeer(files(1), "c", 1)
	if err != nil {
		t.Fatal(err)
	}
	var reloadErrs []error
	p1.OnReloadError(func(err error) { reloadErrs = append(reloadErrs, err) })
	p2, err := LoadPeer(files(2), "c", 2)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", p1.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	a := serialSeen(t, addr, p2.ClientConfig(1))
	if a.Cmp(p1.Cert.Leaf.SerialNumber) != 0 {
		t.Fatalf("handshake presented serial %v, want the loaded %v", a, p1.Cert.Leaf.SerialNumber)
	}

	if _, err := WriteNode(dir, NodeOptions{Cluster: "c", ID: 1, Renew: true, Validity: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := serialSeen(t, addr, p2.ClientConfig(1)); got.Cmp(a) != 0 {
		t.Fatalf("the renewal was read before the interval passed: %v", got)
	}
	p1.live.next.Store(0) // the interval has passed
	b := serialSeen(t, addr, p2.ClientConfig(1))
	cur, _ := p1.Current()
	if b.Cmp(a) == 0 || cur.Leaf.SerialNumber.Cmp(b) != 0 || time.Until(cur.Leaf.NotAfter) > 49*time.Hour {
		t.Fatalf("after the renewal: handshake serial %v (was %v), current %v", b, a, cur.Leaf.SerialNumber)
	}

	// A certificate without its key, then node 2's certificate: refused.
	if _, err := WriteNode(filepath.Join(dir), NodeOptions{Cluster: "c", ID: 1, Renew: true}); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(files(2).Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files(1).Key, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p1.Reload(); err == nil {
		t.Fatal("a certificate with another key loaded")
	}
	for _, name := range []string{DevNodeCert(2), DevNodeKey(2)} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		dst := map[string]string{DevNodeCert(2): files(1).Cert, DevNodeKey(2): files(1).Key}[name]
		if err := os.WriteFile(dst, raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p1.live.next.Store(0)
	if got := serialSeen(t, addr, p2.ClientConfig(1)); got.Cmp(b) != 0 {
		t.Fatalf("a refused renewal replaced the certificate: %v, want %v", got, b)
	}
	if len(reloadErrs) != 1 {
		t.Fatalf("reload errors reported: %v, want node 2's certificate refused", reloadErrs)
	}
}

// TestKeyPairReload: a KeyPair serves the renewed certificate once its
// files change.
func TestKeyPairReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := WriteDev(dir, DevOptions{Cluster: "c", Nodes: 1}); err != nil {
		t.Fatal(err)
	}
	kp, err := LoadKeyPair(filepath.Join(dir, DevNodeCert(1)), filepath.Join(dir, DevNodeKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := kp.GetCertificate(nil)
	before := c.Leaf.SerialNumber
	if _, err := WriteNode(dir, NodeOptions{Cluster: "c", ID: 1, Renew: true}); err != nil {
		t.Fatal(err)
	}
	if err := kp.Reload(); err != nil {
		t.Fatal(err)
	}
	if c, _ := kp.GetCertificate(nil); c.Leaf.SerialNumber.Cmp(before) == 0 {
		t.Fatal("the renewed certificate was not served")
	}
}
