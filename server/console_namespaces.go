package server

import (
	"slices"
	"strings"

	"github.com/paxlock/paxlock/adminapi"
)

// namespaceUse is every namespace of the table with this node's counts:
// held keys and holders over every group's replica on this node, waiters
// queued on the groups it masters.
func (s *Server) namespaceUse() []adminapi.NamespaceUse {
	by := map[string]*adminapi.NamespaceUse{}
	for _, ns := range s.svc.Namespaces() {
		by[ns] = &adminapi.NamespaceUse{Namespace: ns}
	}
	get := func(ns string) *adminapi.NamespaceUse {
		u := by[ns]
		if u == nil {
			// Locks of a namespace removed from the table still count.
			u = &adminapi.NamespaceUse{Namespace: ns}
			by[ns] = u
		}
		return u
	}
	for _, lg := range s.svc.Groups() {
		sm := lg.StateMachine()
		for ns, n := range sm.HeldByNamespace() {
			get(ns).Held += n
		}
		for ns, n := range sm.HoldersByNamespace() {
			get(ns).Holders += n
		}
	}
	for ns, n := range s.svc.WaitersByNamespace() {
		get(ns).Waiters += n
	}
	return sortedUse(by)
}

// mergeNamespaces folds the nodes' namespace counts into one per
// namespace, sorted: held keys and holders from the node that counts
// the most (each node counts every group's replica, some behind), waiters
// summed (each node counts its own masters').
func mergeNamespaces(all []adminapi.NamespaceUse) []adminapi.NamespaceUse {
	by := map[string]*adminapi.NamespaceUse{}
	for _, u := range all {
		m := by[u.Namespace]
		if m == nil {
			m = &adminapi.NamespaceUse{Namespace: u.Namespace}
			by[u.Namespace] = m
		}
		m.Held, m.Holders = max(m.Held, u.Held), max(m.Holders, u.Holders)
		m.Waiters += u.Waiters
	}
	return sortedUse(by)
}

// sortedUse returns by's entries sorted by namespace.
func sortedUse(by map[string]*adminapi.NamespaceUse) []adminapi.NamespaceUse {
	out := make([]adminapi.NamespaceUse, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b adminapi.NamespaceUse) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}
