package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIdentityMismatch: a data directory is stamped at first start, a
// start with the same identity passes, and a start with another cluster
// name, node id, group count or member list is refused with an error that
// names the field and both values.
func TestIdentityMismatch(t *testing.T) {
	t.Parallel()
	base := func() Config {
		c := Config{NodeID: 2, Nodes: []NodeAddr{{ID: 1}, {ID: 2}, {ID: 3}}}
		c.EnsureDefaults()
		return c
	}
	dir := t.TempDir()
	if _, err := checkIdentity(dir, base()); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, identityFile)); err != nil {
		t.Fatalf("not stamped: %v", err)
	}
	// Same identity; addresses and member order may change.
	same := base()
	same.Nodes = []NodeAddr{{ID: 3, Client: "x"}, {ID: 1}, {ID: 2}}
	if _, err := checkIdentity(dir, same); err != nil {
		t.Fatalf("same identity: %v", err)
	}
	for _, tc := range []struct {
		field string
		tune  func(*Config)
		want  []string
	}{
		{"cluster_name", func(c *Config) { c.ClusterName = "other" }, []string{"paxlock", "other"}},
		{"node_id", func(c *Config) { c.NodeID = 3 }, []string{"2", "3"}},
		{"groups", func(c *Config) { c.Groups = 16 }, []string{"15", "16"}},
		{"member ids", func(c *Config) { c.Nodes = append(c.Nodes, NodeAddr{ID: 4}) }, []string{"[1 2 3]", "[1 2 3 4]"}},
	} {
		c := base()
		tc.tune(&c)
		_, err := checkIdentity(dir, c)
		if !errors.Is(err, ErrIdentityMismatch) {
			t.Fatalf("%s changed: err %v, want ErrIdentityMismatch", tc.field, err)
		}
		for _, s := range append([]string{tc.field}, tc.want...) {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s changed: error %q does not say %q", tc.field, err, s)
			}
		}
	}
}

// TestNewRefusesOtherNodesData: New stamps the data directory and refuses
// it to a node with another id.
func TestNewRefusesOtherNodesData(t *testing.T) {
	t.Parallel()
	ports := freePorts(t, 2)
	cfg := Config{NodeID: 1, Nodes: []NodeAddr{{ID: 1, Peer: ports[0], Client: ports[1]}}, DataDir: t.TempDir()}
	s, err := New(cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	cfg.NodeID = 2
	cfg.Nodes[0].ID = 2
	if _, err := New(cfg, testLogger()); !errors.Is(err, ErrIdentityMismatch) || !strings.Contains(err.Error(), "node_id") {
		t.Fatalf("New on node 1's data as node 2: %v, want a node_id mismatch", err)
	}
}

// TestIdentityIncarnation: a directory gets a random incarnation when it
// is stamped, keeps it across starts, and a directory stamped before
// incarnations existed gets one at its next start.
func TestIdentityIncarnation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{ClusterName: "c", NodeID: 1, Groups: 15, Nodes: []NodeAddr{{ID: 1}}}
	first, err := checkIdentity(dir, cfg)
	if err != nil || first.Incarnation == 0 {
		t.Fatalf("first start: %+v %v", first, err)
	}
	again, err := checkIdentity(dir, cfg)
	if err != nil || again.Incarnation != first.Incarnation {
		t.Fatalf("second start: %+v %v, want incarnation %x", again, err, first.Incarnation)
	}
	if other, _ := checkIdentity(t.TempDir(), cfg); other.Incarnation == first.Incarnation {
		t.Fatal("two directories share an incarnation")
	}
	old := t.TempDir()
	legacy := identityOf(cfg)
	if err := writeIdentity(old, legacy); err != nil {
		t.Fatal(err)
	}
	got, err := checkIdentity(old, cfg)
	if err != nil || got.Incarnation == 0 {
		t.Fatalf("a directory stamped without an incarnation: %+v %v", got, err)
	}
	if again, _ := checkIdentity(old, cfg); again.Incarnation != got.Incarnation {
		t.Fatal("the incarnation given to an old directory was not kept")
	}
}
