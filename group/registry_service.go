package group

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/scramauth"
	"github.com/paxlock/paxlock/wire"
)

// This file is the Service's side of the registry tables (registry.go):
// reading this replica's copy and proposing changes to group 0.

// RegistryTables returns this replica's copy of the registry's tables. A
// replica that is not group 0's master may be behind the master; the
// version says how far it has come, and versions only rise.
func (s *Service) RegistryTables() RegistryTables {
	t := &s.groups[NamespaceGroup].sm.reg
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := RegistryTables{Version: t.version}
	for _, c := range t.clusters {
		c.Client, c.Admin = slices.Clone(c.Client), slices.Clone(c.Admin)
		out.Clusters = append(out.Clusters, c)
	}
	for name, n := range t.namespaces {
		out.Namespaces = append(out.Namespaces, RegistryNamespace{
			RegistryNamespace: adminapi.RegistryNamespace{Name: name, Cluster: n.cluster, Epoch: n.epoch},
			Verifier:          n.v,
		})
	}
	for _, m := range t.moves {
		out.Moves = append(out.Moves, m)
	}
	slices.SortFunc(out.Clusters, func(a, b adminapi.RegistryCluster) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Namespaces, func(a, b RegistryNamespace) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Moves, func(a, b adminapi.RegistryMove) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

// RegistryVersion returns the version of this replica's registry tables.
func (s *Service) RegistryVersion() uint64 {
	t := &s.groups[NamespaceGroup].sm.reg
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// PutRegistryCluster adds or changes a cluster of the registry. It must
// run on the master of group 0 (else ErrNotSystemMaster).
func (s *Service) PutRegistryCluster(ctx context.Context, c adminapi.RegistryCluster) error {
	if err := validRegCluster(c); err != nil {
		return err
	}
	return s.proposeRegistry(ctx, &command{op: opRegCluster, key: c.Name, data: appendRegCluster(nil, c)})
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
	if secret == "" && !s.registryHasNamespace(ns) {
		return fmt.Errorf("%w: namespace %q is new: it needs a secret", wire.ErrInvalid, ns)
	}
	n := regNS{cluster: cluster}
	if secret != "" {
		v, err := scramauth.NewVerifier(secret)
		if err != nil {
			return fmt.Errorf("group: namespace verifier: %w", err)
		}
		n.v = v
	}
	return s.proposeRegistry(ctx, &command{op: opRegNamespace, key: ns, data: appendRegNS(nil, n, secret != "")})
}

func (s *Service) registryHasNamespace(ns string) bool {
	t := &s.groups[NamespaceGroup].sm.reg
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.namespaces[ns]
	return ok
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
	data := appendRegMove(nil, m)
	if _, err := parseRegMove(m.Namespace, data); err != nil {
		return fmt.Errorf("%w: move of %q: an id above 0, a known state and two different valid cluster names are required", wire.ErrInvalid, m.Namespace)
	}
	return s.proposeRegistry(ctx, &command{op: opRegMove, key: m.Namespace, token: m.Token, data: data})
}

// DeleteRegistryMove deletes a finished move's record, fenced by token.
func (s *Service) DeleteRegistryMove(ctx context.Context, ns string, token uint64) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	return s.proposeRegistry(ctx, &command{op: opRegMove, key: ns, token: token})
}

func (s *Service) proposeRegistry(ctx context.Context, c *command) error {
	t := &s.groups[NamespaceGroup].sm.reg
	t.propose.Lock()
	defer t.propose.Unlock()
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
	o, ok := res.(regOutcome)
	if !ok {
		return fmt.Errorf("group: registry change: %v", res)
	}
	return o.err()
}
