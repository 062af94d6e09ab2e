package pki

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteNode issues node 4 of a cluster whose material WriteDev made,
// from the same CA: the node loads it as node 4, a second issue refuses
// to overwrite it, a renewal replaces it with a certificate of another
// serial that still loads, and a CA key of another CA is refused.
func TestWriteNode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := WriteDev(dir, DevOptions{Cluster: "prod", Nodes: 3}); err != nil {
		t.Fatal(err)
	}
	files, err := WriteNode(dir, NodeOptions{Cluster: "prod", ID: 4, Hosts: []string{"10.0.0.4", "node4.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("wrote %v", files)
	}
	if fi, err := os.Stat(filepath.Join(dir, DevNodeKey(4))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node 4's key: %v %v", fi, err)
	}
	f := Files{CA: filepath.Join(dir, DevCACert), Cert: filepath.Join(dir, DevNodeCert(4)), Key: filepath.Join(dir, DevNodeKey(4))}
	p, err := LoadPeer(f, "prod", 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Cert.Leaf.DNSNames; len(got) != 1 || got[0] != "node4.example" {
		t.Errorf("DNS names %v", got)
	}
	if _, err := WriteNode(dir, NodeOptions{Cluster: "prod", ID: 4}); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Fatalf("a second issue for node 4: %v", err)
	}
	if _, err := WriteNode(dir, NodeOptions{Cluster: "prod", ID: 4, Renew: true}); err != nil {
		t.Fatal(err)
	}
	renewed, err := LoadPeer(f, "prod", 4)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Cert.Leaf.SerialNumber.Cmp(p.Cert.Leaf.SerialNumber) == 0 {
		t.Error("the renewed certificate has the old serial")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}

	other := filepath.Join(t.TempDir(), "other")
	if _, err := WriteDev(other, DevOptions{Cluster: "prod", Nodes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(filepath.Join(dir, DevCACert), filepath.Join(other, DevCAKey)); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("another CA's key: %v", err)
	}
	if _, err := LoadCA(filepath.Join(dir, DevNodeCert(1)), filepath.Join(dir, DevNodeKey(1))); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("a node certificate as the CA: %v", err)
	}
	if _, err := WriteNode(dir, NodeOptions{Cluster: "prod", ID: 0}); err == nil {
		t.Fatal("node id 0 issued")
	}
}
