package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// Namespaces are group 0's table systable.Namespaces (a SCRAM verifier
// record per namespace); this file applies a namespace change to it, with
// the namespace's quota, and is the Service's side of the table.

// NamespaceGroup is the lock group that holds the namespace table
// (replicated by NamespaceGroup.ReplicaGroup(), like every lock group).
// Its master seeds and changes namespaces.
const NamespaceGroup ID = 0

// ErrNotSystemMaster means this node does not master group 0, where
// namespace changes are proposed; MasterNode names the node that does.
var ErrNotSystemMaster = errors.New("group: not the master of the namespace table")

// ErrUnknownNamespace means the namespace does not exist
// (systable.ErrUnknownNamespace).
var ErrUnknownNamespace = systable.ErrUnknownNamespace

// applyNamespace applies opNamespacePut, opNamespaceDelete and
// opNamespaceInit to the namespace table; a delete removes the
// namespace's quota as well, whether or not the namespace existed.
func (sm *StateMachine) applyNamespace(c *command, w paxos.Writer) systable.NamespaceOutcome {
	switch c.op {
	case opNamespaceInit:
		return sm.ns.ApplyInit(c.data, w)
	case opNamespacePut:
		return sm.ns.ApplyPut(c.key, c.data, w)
	}
	o := sm.ns.ApplyDelete(c.key, w)
	sm.quotas.Drop(c.key, w)
	return o
}

// SeedVerifier derives the verifier of a configured namespace
// (systable.SeedVerifier): with a salt derived from the cluster and
// namespace names, so that every node derives the same one.
func SeedVerifier(cluster, ns, secret string) (scramauth.Verifier, error) {
	return systable.SeedVerifier(cluster, ns, secret)
}

// Credentials returns namespace ns's SCRAM verifier as this replica of
// the namespace table knows it, false if the namespace does not exist or
// cannot authenticate (a version-1 record whose secret the node's
// configuration does not hold). Until the table has been initialised (a
// fresh cluster whose group 0 has not yet installed the configured
// namespaces), seed holds the configured ones' verifiers; seedSecrets are
// the configured secrets, which give a version-1 record its verifier.
func (s *Service) Credentials(ns string, seed map[string]scramauth.Verifier, seedSecrets map[string]string) (scramauth.Verifier, bool) {
	return s.namespaces().Verifier(ns, seed, seedSecrets)
}

// namespaces is this replica's namespace table.
func (s *Service) namespaces() *systable.Namespaces { return &s.groups[NamespaceGroup].sm.ns }

// NamespaceGeneration counts the changes this replica has applied to the
// namespace table (a namespace put, deleted or installed, a snapshot
// loaded). A session authenticated at one generation must be checked
// again once the generation moves: its namespace may be gone or its
// secret changed.
func (s *Service) NamespaceGeneration() uint64 { return s.namespaces().Generation() }

// Namespaces lists the namespaces, sorted.
func (s *Service) Namespaces() []string { return s.namespaces().Names() }

// HasNamespace reports whether ns exists.
func (s *Service) HasNamespace(ns string) bool { return s.namespaces().Has(ns) }

// SystemMaster returns the node mastering the namespace table, 0 if none
// is known.
func (s *Service) SystemMaster() paxos.NodeID {
	return s.groups[NamespaceGroup].px.Status().Master
}

// PutNamespace creates namespace ns or changes its secret. It must run on
// the master of group 0 (else ErrNotSystemMaster).
func (s *Service) PutNamespace(ctx context.Context, ns, secret string) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	rec, err := systable.NewNamespaceRecord(secret)
	if err != nil {
		return err
	}
	return s.proposeNamespace(ctx, &command{op: opNamespacePut, key: ns, data: rec})
}

// PutNamespaceVerifier creates namespace ns or changes its verifier to
// v, derived from the secret elsewhere (a registry installs the meta
// cluster's so). It must run on the master of group 0.
func (s *Service) PutNamespaceVerifier(ctx context.Context, ns string, v scramauth.Verifier) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", wire.ErrInvalid, ns, err)
	}
	return s.proposeNamespace(ctx, &command{op: opNamespacePut, key: ns, data: systable.EncodeNamespaceRecord(v)})
}

// DeleteNamespace removes namespace ns: its clients can no longer
// authenticate; locks they hold expire unless renewed on open connections.
func (s *Service) DeleteNamespace(ctx context.Context, ns string) error {
	return s.proposeNamespace(ctx, &command{op: opNamespaceDelete, key: ns})
}

func (s *Service) proposeNamespace(ctx context.Context, c *command) error {
	res, err := s.proposeTable(ctx, c, "namespace change")
	if err != nil {
		return err
	}
	o, ok := res.(systable.NamespaceOutcome)
	if !ok {
		return fmt.Errorf("group: namespace change: %v", res)
	}
	return o.Err()
}

// NamespacesInitialised reports whether the namespace table was ever
// written.
func (s *Service) NamespacesInitialised() bool { return s.namespaces().Initialised() }

// InitNamespaces installs the configured namespaces, with their
// verifiers, if the table was never written (a no-op otherwise). It must
// run on the master of group 0.
func (s *Service) InitNamespaces(ctx context.Context, seed map[string]scramauth.Verifier) error {
	data, err := systable.EncodeNamespaceSeed(seed)
	if err != nil {
		return err
	}
	return s.proposeNamespace(ctx, &command{op: opNamespaceInit, data: data})
}
