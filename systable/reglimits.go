package systable

import (
	"errors"
	"fmt"
)

// RegistryLimits bound the registry's tables: group 0's master refuses a
// change that would add an entry beyond them (ErrRegistryFull), so that
// the tables a registry process holds, and the pages a meta node serves
// it, stay bounded. Changes of entries that exist are never refused by
// them. Zero fields take the defaults.
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

// RegistryTable names one of the registry's tables.
type RegistryTable uint8

// The registry's tables.
const (
	RegistryClusters RegistryTable = iota + 1
	RegistryNamespaces
	RegistryMoves
)

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Room refuses (ErrRegistryFull) a put of name into table tab that would
// add an entry beyond lim. Group 0's master checks it before the
// proposal, with its proposals serialised, so that each sees the outcome
// of the one before; the count is this replica's, which a master has
// applied through every instance chosen before it serves.
func (t *Registry) Room(tab RegistryTable, name string, lim RegistryLimits) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var exists bool
	var n, limit int
	var what string
	switch tab {
	case RegistryClusters:
		_, exists = t.clusters[name]
		n, limit, what = len(t.clusters), orDefault(lim.MaxClusters, DefaultMaxRegistryClusters), "clusters"
	case RegistryNamespaces:
		_, exists = t.namespaces[name]
		n, limit, what = len(t.namespaces), orDefault(lim.MaxNamespaces, DefaultMaxRegistryNamespaces), "namespaces"
	case RegistryMoves:
		_, exists = t.moves[name]
		n, limit, what = len(t.moves), orDefault(lim.MaxMoves, DefaultMaxRegistryMoves), "moves"
	default:
		return nil
	}
	if exists || n < limit {
		return nil
	}
	return fmt.Errorf("%w: %d %s, the limit (raise it with registry_max_%s)", ErrRegistryFull, n, what, what)
}
