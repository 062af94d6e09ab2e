package server

import (
	"sort"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
)

// quotaStatus is namespace ns's quota and use on this node (u); a
// namespace without a quota has the zero quota.
func quotaStatus(ns string, u group.QuotaUsage) adminapi.QuotaStatus {
	q := u.Quota
	st := adminapi.QuotaStatus{
		Namespace: ns,
		Quota:     adminapi.NamespaceQuota{Held: q.Held, Waiters: q.Waiters, Rate: q.Rate, Burst: q.Burst},
		Held:      u.Held, Waiters: u.Waiters, NodeWaiters: u.NodeWaiters, NodeRate: u.NodeRate, NodeBurst: u.NodeBurst,
		Refused: map[string]uint64{},
	}
	for k := range group.NumQuotaKinds {
		st.Refused[k.String()] = u.Refused[k]
	}
	return st
}

// quotas returns every namespace with a quota, sorted, with its use on
// this node.
func (s *Server) quotas() []adminapi.QuotaStatus {
	use := s.svc.QuotaUsage()
	out := make([]adminapi.QuotaStatus, 0, len(use))
	for ns, u := range use {
		out = append(out, quotaStatus(ns, u))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

// mergeQuotas merges the nodes' quota statuses into one per namespace,
// sorted: the quota and holders of the node that has applied the most
// (each node counts every group), waiters and refusals summed (each node
// counts its own masters').
func mergeQuotas(all []adminapi.QuotaStatus) []adminapi.QuotaStatus {
	by := map[string]*adminapi.QuotaStatus{}
	for _, q := range all {
		m := by[q.Namespace]
		if m == nil {
			m = &adminapi.QuotaStatus{Namespace: q.Namespace, Quota: q.Quota, Refused: map[string]uint64{}}
			by[q.Namespace] = m
		}
		m.Held = max(m.Held, q.Held)
		m.Waiters += q.Waiters
		for k, n := range q.Refused {
			m.Refused[k] += n
		}
	}
	out := make([]adminapi.QuotaStatus, 0, len(by))
	for _, m := range by {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}
