package group

import (
	"context"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// A namespace's quota is group 0's table systable.Quotas; this file
// applies a quota change next to the namespace table and is the
// Service's side of the table.

// MaxQuota bounds each limit of a Quota (systable.MaxQuota).
const MaxQuota = systable.MaxQuota

// Quota is a namespace's limits; 0 in a field means unlimited
// (systable.Quota). The masters enforce them: see quotacheck.go for how
// each is counted and how the cluster-wide ones split over the nodes
// mastering groups.
type Quota = systable.Quota

// applyQuota applies opNamespaceQuota: key = namespace, data = the
// encoded Quota (a zero one removes the record). A namespace that does
// not exist is refused (systable.QuotaNoNamespace).
func (sm *StateMachine) applyQuota(c *command, w paxos.Writer) systable.QuotaOutcome {
	return sm.quotas.Apply(c.key, c.data, sm.ns.Has(c.key), w)
}

// Quotas returns the namespaces' quotas as this replica of the namespace
// table knows them (namespaces without one are absent).
func (s *Service) Quotas() map[string]Quota {
	return s.groups[NamespaceGroup].sm.quotas.All()
}

// PutQuota sets namespace ns's quota (a zero Quota removes it). It must
// run on the master of group 0 (else ErrNotSystemMaster); an unknown
// namespace is ErrUnknownNamespace. The quota is enforced on this node
// once PutQuota returns, and on the others once they apply it.
func (s *Service) PutQuota(ctx context.Context, ns string, q Quota) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	if err := q.Validate(); err != nil {
		return err
	}
	res, err := s.proposeTable(ctx, &command{op: opNamespaceQuota, key: ns, data: systable.EncodeQuota(q)}, "quota change")
	if err != nil {
		return err
	}
	switch o, _ := res.(systable.QuotaOutcome); o {
	case systable.QuotaApplied:
	case systable.QuotaNoNamespace:
		return ErrUnknownNamespace
	default:
		return fmt.Errorf("group: quota change: %v", res)
	}
	s.quota.refresh(s)
	return nil
}
