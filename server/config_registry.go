package server

import "github.com/paxlock/paxlock/group"

// RegistryLimits bound the registry's tables this node keeps when it is
// group 0's master of a meta cluster (Config embeds them; see
// group.RegistryLimits): a PUT that would add an entry beyond them is
// answered 409 with the limit named, and nothing is proposed.
type RegistryLimits struct {
	// RegistryMaxClusters bounds the registry's lock clusters (default
	// 1024).
	RegistryMaxClusters int `json:"registry_max_clusters"`
	// RegistryMaxNamespaces bounds the registry's namespaces (default
	// 100000).
	RegistryMaxNamespaces int `json:"registry_max_namespaces"`
	// RegistryMaxMoves bounds the registry's move records, finished ones
	// not yet deleted included (default 10000).
	RegistryMaxMoves int `json:"registry_max_moves"`
}

// ensureDefaults fills the unset limits.
func (l *RegistryLimits) ensureDefaults() {
	if l.RegistryMaxClusters <= 0 {
		l.RegistryMaxClusters = group.DefaultMaxRegistryClusters
	}
	if l.RegistryMaxNamespaces <= 0 {
		l.RegistryMaxNamespaces = group.DefaultMaxRegistryNamespaces
	}
	if l.RegistryMaxMoves <= 0 {
		l.RegistryMaxMoves = group.DefaultMaxRegistryMoves
	}
}

// group is l as the lock service takes it.
func (l RegistryLimits) group() group.RegistryLimits {
	return group.RegistryLimits{MaxClusters: l.RegistryMaxClusters, MaxNamespaces: l.RegistryMaxNamespaces, MaxMoves: l.RegistryMaxMoves}
}
