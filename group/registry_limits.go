package group

import (
	"errors"
	"fmt"
)

// RegistryLimits bound the registry's tables (registry.go): group 0's
// master refuses a change that would add an entry beyond them
// (ErrRegistryFull), so that the tables a registry process holds, and
// the pages a meta node serves it, stay bounded. Changes of entries that
// exist are never refused by them. Zero fields take the defaults.
type RegistryLimits struct {
	// MaxClusters bounds the lock clusters (default 1024).
	MaxClusters int
	// MaxNamespaces bounds the namespaces (default 100000).
	MaxNamespaces int
	// MaxMoves bounds the moves' records, finished ones not yet deleted
	// included (default 10000).
	MaxMoves int
}

// The defaults of RegistryLimits.
const (
	DefaultMaxRegistryClusters   = 1024
	DefaultMaxRegistryNamespaces = 100000
	DefaultMaxRegistryMoves      = 10000
)

// ErrRegistryFull refuses a change that would add a cluster, namespace
// or move beyond RegistryLimits.
var ErrRegistryFull = errors.New("group: the registry tables are full")

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// checkRoom refuses a new entry of the table named what that holds n
// entries, limit at most. It runs on group 0's master before the
// proposal, under the registry's proposal mutex, so that this node's
// proposals see each other's outcome; the count is this replica's,
// which a master has applied through every instance chosen before it
// serves.
func checkRoom(what string, exists bool, n, limit int) error {
	if exists || n < limit {
		return nil
	}
	return fmt.Errorf("%w: %d %s, the limit (raise it with registry_max_%s)", ErrRegistryFull, n, what, what)
}

// registryRoom checks c against the limits (see checkRoom).
func (s *Service) registryRoom(c *command) error {
	lim := s.cfg.Registry
	t := &s.groups[NamespaceGroup].sm.reg
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(c.data) == 0 {
		return nil // a delete
	}
	switch c.op {
	case opRegCluster:
		_, ok := t.clusters[c.key]
		return checkRoom("clusters", ok, len(t.clusters), orDefault(lim.MaxClusters, DefaultMaxRegistryClusters))
	case opRegNamespace:
		_, ok := t.namespaces[c.key]
		return checkRoom("namespaces", ok, len(t.namespaces), orDefault(lim.MaxNamespaces, DefaultMaxRegistryNamespaces))
	case opRegMove:
		_, ok := t.moves[c.key]
		return checkRoom("moves", ok, len(t.moves), orDefault(lim.MaxMoves, DefaultMaxRegistryMoves))
	}
	return nil
}
