package group

import (
	"context"
	"fmt"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/systable"
)

// This file is the Service's side of the registry tables
// (systable.Registry):
// reading this replica's copy and proposing changes to group 0.

// RegistryTables returns this replica's copy of the registry's tables. A
// replica that is not group 0's master may be behind the master; the
// version says how far it has come, and versions only rise.
func (s *Service) RegistryTables() RegistryTables { return s.registry().Tables() }

// RegistryVersion returns the version of this replica's registry tables.
func (s *Service) RegistryVersion() uint64 { return s.registry().Version() }

// registry is this replica's registry tables.
func (s *Service) registry() *systable.Registry { return &s.groups[NamespaceGroup].sm.reg }

// PutRegistryCluster adds or changes a cluster of the registry. It must
// run on the master of group 0 (else ErrNotSystemMaster).
func (s *Service) PutRegistryCluster(ctx context.Context, c adminapi.RegistryCluster) error {
	if err := systable.ValidateRegistryCluster(c); err != nil {
		return err
	}
	return s.proposeRegistry(ctx, &command{op: opRegCluster, key: c.Name, data: systable.EncodeRegistryCluster(c)})
}

// DeleteRegistryCluster removes a cluster from the registry; refused
// (ErrRegistryInUse) while a namespace or an unfinished move names it.
func (s *Service) DeleteRegistryCluster(ctx context.Context, name string) error {
	if err := ValidateClusterName(name); err != nil {
		return err
	}
	return s.proposeRegistry(ctx, &command{op: opRegCluster, key: name})
}

// PutRegistryNamespace assigns namespace ns to cluster and, when secret
// is not empty, sets its verifier, derived here from secret with a fresh
// salt (the secret is not stored). A new namespace needs a secret. A
// change of cluster raises the namespace's epoch; it is refused
// (ErrRegistryMoveConflict) while the namespace is moving.
func (s *Service) PutRegistryNamespace(ctx context.Context, ns, cluster, secret string) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	if err := ValidateClusterName(cluster); err != nil {
		return err
	}
	if secret == "" && !s.registry().HasNamespace(ns) {
		return fmt.Errorf("%w: namespace %q is new: it needs a secret", wire.ErrInvalid, ns)
	}
	var v *scramauth.Verifier
	if secret != "" {
		nv, err := scramauth.NewVerifier(secret)
		if err != nil {
			return fmt.Errorf("group: namespace verifier: %w", err)
		}
		v = &nv
	}
	return s.proposeRegistry(ctx, &command{op: opRegNamespace, key: ns, data: systable.EncodeRegistryNamespace(cluster, v)})
}

// DeleteRegistryNamespace removes namespace ns from the registry;
// refused (ErrRegistryMoveConflict) while it is moving.
func (s *Service) DeleteRegistryNamespace(ctx context.Context, ns string) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	return s.proposeRegistry(ctx, &command{op: opRegNamespace, key: ns})
}

// PutRegistryMove writes a move's record, fenced by m.Token (see
// adminapi.RegistryMove).
func (s *Service) PutRegistryMove(ctx context.Context, m adminapi.RegistryMove) error {
	if err := wire.ValidateNamespace(m.Namespace); err != nil {
		return err
	}
	if err := systable.CheckRegistryMove(m); err != nil {
		return fmt.Errorf("%w: move of %q: an id above 0, a known state and two different valid cluster names are required", wire.ErrInvalid, m.Namespace)
	}
	return s.proposeRegistry(ctx, &command{op: opRegMove, key: m.Namespace, token: m.Token, data: systable.EncodeRegistryMove(m)})
}

// DeleteRegistryMove deletes a finished move's record, fenced by token.
func (s *Service) DeleteRegistryMove(ctx context.Context, ns string, token uint64) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	return s.proposeRegistry(ctx, &command{op: opRegMove, key: ns, token: token})
}

// proposeRegistry proposes c, a registry change, in group 0, checked
// first against the limits (registryRoom) with this node's registry
// proposals serialised, so that each check sees the outcome of the one
// before.
func (s *Service) proposeRegistry(ctx context.Context, c *command) error {
	sm := s.groups[NamespaceGroup].sm
	sm.regPropose.Lock()
	defer sm.regPropose.Unlock()
	if !s.groups[NamespaceGroup].px.Status().Serving {
		return ErrNotSystemMaster // redirected, not judged on a replica that may be behind
	}
	if err := s.registryRoom(c); err != nil {
		return err
	}
	res, err := s.proposeTable(ctx, c, "registry change")
	if err != nil {
		return err
	}
	o, ok := res.(systable.RegistryOutcome)
	if !ok {
		return fmt.Errorf("group: registry change: %v", res)
	}
	return o.Err()
}

// registryRoom refuses (ErrRegistryFull) a put c that would add an entry
// beyond Config.Registry's limits; a delete is never refused.
func (s *Service) registryRoom(c *command) error {
	if len(c.data) == 0 {
		return nil
	}
	return s.registry().Room(registryTable(c.op), c.key, s.cfg.Registry)
}
