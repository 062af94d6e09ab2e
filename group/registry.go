package group

import (
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// The registry's tables are group 0's table systable.Registry (group 0 of
// a meta cluster holds them); this file sends a registry change to it and
// names its types for the Service's callers. registry_service.go is the
// Service's side.

// Registry-change errors (package systable's).
var (
	// ErrRegistryUnknown means the change names a cluster, namespace or
	// move the tables do not hold.
	ErrRegistryUnknown = systable.ErrRegistryUnknown
	// ErrRegistryInUse refuses to remove a cluster that a namespace or an
	// unfinished move names.
	ErrRegistryInUse = systable.ErrRegistryInUse
	// ErrStaleMoveToken refuses a move put whose fencing token is below
	// the highest the move's record has seen.
	ErrStaleMoveToken = systable.ErrStaleMoveToken
	// ErrRegistryMoveConflict refuses a change that contradicts a move
	// (systable.ErrRegistryMoveConflict).
	ErrRegistryMoveConflict = systable.ErrRegistryMoveConflict
	// ErrRegistryFull refuses a change that would add a cluster,
	// namespace or move beyond RegistryLimits.
	ErrRegistryFull = systable.ErrRegistryFull
)

// RegistryNamespace is one namespace's assignment with its verifier.
type RegistryNamespace = systable.RegistryNamespace

// RegistryTables is a copy of the registry's tables, each sorted by name.
type RegistryTables = systable.RegistryTables

// RegistryLimits bound the registry's tables (systable.RegistryLimits):
// group 0's master refuses a change that would add an entry beyond them.
type RegistryLimits = systable.RegistryLimits

// The defaults of RegistryLimits.
const (
	DefaultMaxRegistryClusters   = systable.DefaultMaxRegistryClusters
	DefaultMaxRegistryNamespaces = systable.DefaultMaxRegistryNamespaces
	DefaultMaxRegistryMoves      = systable.DefaultMaxRegistryMoves
)

// ValidateClusterName checks a cluster name of the registry: a
// namespace's syntax (1 to 64 bytes of letters, digits, '.', '_', '-').
func ValidateClusterName(name string) error { return systable.ValidateClusterName(name) }

// applyRegistry applies opRegCluster, opRegNamespace and opRegMove
// (group 0): key names the entry, data is its record (none: a delete),
// a move's token is the mover's fencing token.
func (sm *StateMachine) applyRegistry(c *command, w paxos.Writer) systable.RegistryOutcome {
	switch c.op {
	case opRegCluster:
		return sm.reg.ApplyCluster(c.key, c.data, w)
	case opRegNamespace:
		return sm.reg.ApplyNamespace(c.key, c.data, w)
	}
	return sm.reg.ApplyMove(c.key, c.token, c.data, w)
}

// registryTable is the registry table a registry op changes.
func registryTable(o op) systable.RegistryTable {
	switch o {
	case opRegCluster:
		return systable.RegistryClusters
	case opRegNamespace:
		return systable.RegistryNamespaces
	}
	return systable.RegistryMoves
}
