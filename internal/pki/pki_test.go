package pki

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNodeURI(t *testing.T) {
	u := NodeURI("Prod-1", 7)
	if u.String() != "paxlock://prod-1/node/7" {
		t.Fatalf("NodeURI = %s", u)
	}
	c, id, err := ParseNodeURI(u)
	if err != nil || c != "prod-1" || id != 7 {
		t.Fatalf("ParseNodeURI(%s) = %q %d %v", u, c, id, err)
	}
	for _, bad := range []string{
		"https://prod/node/7", "paxlock://prod/node/0", "paxlock://prod/node/07", "paxlock://prod/node/x",
		"paxlock://prod/nodes/7", "paxlock://prod:1/node/7", "paxlock://u@prod/node/7", "paxlock://prod/node/7?x=1",
		"paxlock://prod/node/4294967296", "paxlock://pr_od/node/7",
	} {
		u, err := url.Parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ParseNodeURI(u); !errors.Is(err, ErrIdentity) {
			t.Errorf("ParseNodeURI(%s): %v, want ErrIdentity", bad, err)
		}
	}
}

func TestWriteDevAndLoadPeer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	files, err := WriteDev(dir, DevOptions{Cluster: "paxlock", Nodes: 3, Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 10 {
		t.Fatalf("wrote %d files: %v", len(files), files)
	}
	if fi, err := os.Stat(filepath.Join(dir, DevNodeKey(1))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node key mode: %v %v", fi, err)
	}
	f := func(id int) Files {
		return Files{CA: filepath.Join(dir, DevCACert), Cert: filepath.Join(dir, DevNodeCert(id)), Key: filepath.Join(dir, DevNodeKey(id))}
	}
	p, err := LoadPeer(f(2), "paxlock", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckNode(p.Cert.Leaf, "paxlock", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPeer(f(2), "paxlock", 3); !errors.Is(err, ErrIdentity) {
		t.Fatalf("node 2's files for node 3: %v", err)
	}
	if _, err := LoadPeer(f(2), "other", 2); !errors.Is(err, ErrIdentity) {
		t.Fatalf("node 2's files for cluster other: %v", err)
	}
	mixed := f(2)
	mixed.Key = filepath.Join(dir, DevNodeKey(1))
	if _, err := LoadPeer(mixed, "paxlock", 2); err == nil {
		t.Fatal("node 2's certificate with node 1's key loaded")
	}
	if _, err := WriteDev(dir, DevOptions{Cluster: "paxlock", Nodes: 3}); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Fatalf("second WriteDev: %v", err)
	}
}

// FuzzParseNodeURI: whatever URI a certificate carries, parsing never
// panics, and a URI it accepts names the node NodeURI would write.
func FuzzParseNodeURI(f *testing.F) {
	for _, s := range []string{"paxlock://paxlock/node/1", "paxlock://a.b-c/node/4294967295", "paxlock://x/node/0", "https://x/node/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		c, id, err := ParseNodeURI(u)
		if err != nil {
			return
		}
		if id == 0 || ValidCluster(c) != nil {
			t.Fatalf("%q accepted as node %d of %q", s, id, c)
		}
		if got := NodeURI(c, id).String(); !strings.EqualFold(got, u.String()) {
			t.Fatalf("%q parsed as %q", s, got)
		}
	})
}
