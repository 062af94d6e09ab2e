package adminapi

// NamespaceQuota is a namespace's quota, the body of PUT
// /namespaces/{name}/quota; 0 in a field means unlimited. Held bounds the
// namespace's holders at once (each writer, each reader of a read lock,
// each holder of semaphore permits), Waiters its blocked acquires queued
// at once, Rate its new requests per second (acquires, state queries,
// watches), all cluster-wide; Burst is how many requests above Rate may
// pass at once (0: Rate). Every field 0 removes the quota.
type NamespaceQuota struct {
	Held    int64 `json:"held"`
	Waiters int64 `json:"waiters"`
	Rate    int64 `json:"rate"`
	Burst   int64 `json:"burst"`
}

// QuotaStatus is one namespace's quota and its use as the answering node
// sees it: an entry of GET /namespaces/quotas, or GET
// /namespaces/{name}/quota.
type QuotaStatus struct {
	Namespace string         `json:"namespace"`
	Quota     NamespaceQuota `json:"quota"`
	// Held is the namespace's holders (each writer, reader and semaphore
	// permit holder), cluster-wide, as the node's replicas have applied
	// them.
	Held int64 `json:"held"`
	// Waiters is the namespace's blocked acquires queued on the node's
	// masters; NodeWaiters, NodeRate and NodeBurst are the node's shares
	// of the cluster-wide limits (0: unlimited).
	Waiters     int64 `json:"waiters"`
	NodeWaiters int64 `json:"node_waiters,omitempty"`
	NodeRate    int64 `json:"node_rate,omitempty"`
	NodeBurst   int64 `json:"node_burst,omitempty"`
	// Refused counts the node's refusals by quota: held, waiters, rate.
	Refused map[string]uint64 `json:"refused"`
}
