package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCertsFileModes: certs writes its directory 0700, the keys, the
// admin token and the gossip key 0600 (only the certificates are
// readable by others, 0644), and so does certs client for its key.
func TestCertsFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, errOut := runCtl(t, "", "certs", "-out", dir, "-nodes", "2"); code != 0 {
		t.Fatalf("certs: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCtl(t, "", "certs", "client", "ops", "-out", dir); code != 0 {
		t.Fatalf("certs client: exit %d: %s", code, errOut)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o700 {
		t.Errorf("%s: mode %o, want 700", dir, m)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	secrets := 0
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if strings.HasSuffix(e.Name(), ".crt") {
			want = 0o644
		} else {
			secrets++
		}
		if m := info.Mode().Perm(); m&^want != 0 {
			t.Errorf("%s: mode %o, want at most %o", e.Name(), m, want)
		}
	}
	if secrets < 5 { // ca.key, node1.key, node2.key, admin.token, gossip.key, client-ops.key
		t.Errorf("found %d secret files, want the keys, the token and the gossip key", secrets)
	}
}
