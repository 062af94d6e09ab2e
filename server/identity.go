package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// identityFile is the file in the data directory that records which
// cluster and node the data belongs to.
const identityFile = "IDENTITY"

// ErrIdentityMismatch is returned by New when the data directory was
// stamped by another cluster, node, group count or member list than the
// configuration names.
var ErrIdentityMismatch = errors.New("data directory belongs to another configuration")

// identity is what a data directory is stamped with at first start.
// Changing the group count re-maps keys to groups, changing the member
// list breaks quorum intersection, and another node id or cluster means
// the data is someone else's: a node refuses to start on any of these.
// Addresses are not stamped; they may change.
type identity struct {
	Cluster string   `json:"cluster"`
	NodeID  uint32   `json:"node_id"`
	Groups  int      `json:"groups"`
	Members []uint32 `json:"members"`
}

func identityOf(cfg Config) identity {
	id := identity{Cluster: cfg.ClusterName, NodeID: cfg.NodeID, Groups: cfg.Groups}
	for _, n := range cfg.Nodes {
		id.Members = append(id.Members, n.ID)
	}
	slices.Sort(id.Members)
	return id
}

// checkIdentity stamps dir with cfg's identity if it has none, and
// otherwise fails with ErrIdentityMismatch naming the first field that
// differs and both values.
func checkIdentity(dir string, cfg Config) error {
	want := identityOf(cfg)
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return writeIdentity(dir, want)
	}
	if err != nil {
		return fmt.Errorf("server: read %s: %w", path, err)
	}
	var have identity
	if err := json.Unmarshal(b, &have); err != nil {
		return fmt.Errorf("server: %s is damaged (%v): %w", path, err, ErrIdentityMismatch)
	}
	mismatch := func(field string, stamped, configured any) error {
		return fmt.Errorf("server: %s: %s is %v on disk but %v in the configuration: %w", path, field, stamped, configured, ErrIdentityMismatch)
	}
	switch {
	case have.Cluster != want.Cluster:
		return mismatch("cluster_name", have.Cluster, want.Cluster)
	case have.NodeID != want.NodeID:
		return mismatch("node_id", have.NodeID, want.NodeID)
	case have.Groups != want.Groups:
		return mismatch("groups", have.Groups, want.Groups)
	case !slices.Equal(have.Members, want.Members):
		return mismatch("member ids", have.Members, want.Members)
	}
	return nil
}

// writeIdentity writes the identity file atomically: a temporary file,
// synced, renamed into place, and the directory synced.
func writeIdentity(dir string, id identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	tmp := filepath.Join(dir, identityFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, identityFile))
	}
	if err != nil {
		_ = os.Remove(tmp) // best effort: the write's error is the one to report
		return fmt.Errorf("server: identity: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("server: identity: sync dir: %w", err)
	}
	return nil
}
