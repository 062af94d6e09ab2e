package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/wire"
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

// quotasHandler answers GET /namespaces/quotas: the namespaces with a
// quota, each with its use as this node sees it.
func (s *Server) quotasHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.quotas())
}

// quotaHandler shows (GET) or sets (PUT adminapi.NamespaceQuota; all 0
// removes it) namespace {name}'s quota. A change is proposed to group 0,
// so a node that does not master it redirects to the one that does.
func (s *Server) quotaHandler(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if r.Method == http.MethodGet {
		if !s.svc.HasNamespace(name) {
			http.Error(w, "unknown namespace", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(quotaStatus(name, s.svc.QuotaUsage()[name]))
		return
	}
	var body adminapi.NamespaceQuota
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		http.Error(w, `body: want {"held": N, "waiters": N, "rate": N, "burst": N} (0: unlimited)`, http.StatusBadRequest)
		return
	}
	q := group.Quota{Held: body.Held, Waiters: body.Waiters, Rate: body.Rate, Burst: body.Burst}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	err := s.svc.PutQuota(ctx, name, q)
	switch {
	case err == nil:
		s.log.Info("namespace quota changed", "name", name, "held", q.Held, "waiters", q.Waiters, "rate", q.Rate, "burst", q.Burst)
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, group.ErrNotSystemMaster):
		s.redirectToSystemMaster(w, r, "namespace table")
	case errors.Is(err, group.ErrUnknownNamespace):
		http.Error(w, "unknown namespace", http.StatusNotFound)
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
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
