package server

import (
	"crypto/rand"
	"encoding/binary"
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
	// Incarnation is drawn at random when the directory is stamped: it
	// tells this data directory from any other the node id had (0 in
	// directories stamped before it existed). The cluster's member list
	// records it, and refuses a join under a known id with another one.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Joined says the node entered a running cluster (paxlockd -join):
	// its member set is in its groups' logs, and the configured nodes
	// are not compared with Members.
	Joined bool `json:"joined,omitempty"`
}

func identityOf(cfg Config) identity {
	id := identity{Cluster: cfg.ClusterName, NodeID: cfg.NodeID, Groups: cfg.Groups}
	for _, n := range cfg.Nodes {
		id.Members = append(id.Members, n.ID)
	}
	slices.Sort(id.Members)
	id.Joined = cfg.Join
	return id
}

// newIncarnation draws a data directory's incarnation (never 0).
func newIncarnation() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("server: incarnation: %w", err)
	}
	return binary.BigEndian.Uint64(b[:]) | 1, nil
}

// checkIdentity stamps dir with cfg's identity if it has none (with a
// new incarnation), and otherwise fails with ErrIdentityMismatch naming
// the first field that differs and both values. It returns the identity
// in force.
func checkIdentity(dir string, cfg Config) (identity, error) {
	want := identityOf(cfg)
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if want.Incarnation, err = newIncarnation(); err != nil {
			return identity{}, err
		}
		return want, writeIdentity(dir, want)
	}
	if err != nil {
		return identity{}, fmt.Errorf("server: read %s: %w", path, err)
	}
	var have identity
	if err := json.Unmarshal(b, &have); err != nil {
		return identity{}, fmt.Errorf("server: %s is damaged (%v): %w", path, err, ErrIdentityMismatch)
	}
	mismatch := func(field string, stamped, configured any) (identity, error) {
		return identity{}, fmt.Errorf("server: %s: %s is %v on disk but %v in the configuration: %w", path, field, stamped, configured, ErrIdentityMismatch)
	}
	switch {
	case have.Cluster != want.Cluster:
		return mismatch("cluster_name", have.Cluster, want.Cluster)
	case have.NodeID != want.NodeID:
		return mismatch("node_id", have.NodeID, want.NodeID)
	case have.Groups != want.Groups:
		return mismatch("groups", have.Groups, want.Groups)
	case !have.Joined && !want.Joined && !slices.Equal(have.Members, want.Members):
		return mismatch("member ids", have.Members, want.Members)
	}
	if have.Incarnation == 0 {
		// Stamped before incarnations existed: this directory gets one now.
		if have.Incarnation, err = newIncarnation(); err != nil {
			return identity{}, err
		}
		if err := writeIdentity(dir, have); err != nil {
			return identity{}, err
		}
	}
	return have, nil
}

// writeIdentity writes the identity file atomically (writeFileAtomic).
func writeIdentity(dir string, id identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	if err := writeFileAtomic(dir, identityFile, append(b, '\n')); err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to dir/name atomically: a temporary file,
// synced, renamed into place, and the directory synced.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp) // best effort: the write's error is the one to report
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	return nil
}
