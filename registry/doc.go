// Package registry is paxlock's registry: a process that knows several
// clusters, maps each namespace to one of them and serves clients the
// cluster view of their namespace.
//
// It is WLock's registry model. It follows every cluster's view over the
// wire protocol (SubscribeView on any reachable node) and serves the
// SCRAM handshake, Heartbeat, GetView and SubscribeView to clients on the
// same protocol, so a client needs only registry addresses and its
// namespace. It authenticates clients with the same code as a node
// (session.Accepted), against the namespaces' verifiers.
//
// Its tables (clusters, namespaces with their assignment and verifier,
// moves) come from one of two sources: a static configuration
// (StandaloneConfig.Clusters, Namespaces and Secrets), or the meta cluster
// (MetaConfig): a paxlock cluster whose lock group 0 holds them as
// replicated records, which the registry subscribes to and which any
// number of registry processes share. With a meta cluster the registry
// also installs each namespace's verifier on its cluster and drives
// namespace moves (package registry/mover).
//
// A registry never takes part in a lock cluster: it joins no gossip and no
// Paxos group, and what it serves is the view the cluster's nodes built.
//
// # Files by job
//
//   - standalone.go: StandaloneConfig, Standalone (New, Start, Shutdown),
//     following clusters and accepting clients.
//   - rconn.go: one client connection: its session and the views it is
//     served.
//   - upstream.go: following one cluster's view over a session with one of
//     its nodes.
//   - tables.go: the registry's tables (static or from the meta cluster)
//     and the views stamped with a namespace's epoch.
//   - meta.go: MetaConfig and the subscription to the meta cluster's
//     tables (SubscribeRegistry), resumed after a reconnect.
//   - install.go: installing the namespaces' verifiers on their lock
//     clusters through their admin API.
//   - moves.go: driving namespace moves while holding the mover lock.
//   - movecluster.go: one lock cluster's move steps, as registry/mover
//     calls them, over its admin API.
//   - adminclient.go: an admin HTTP client for one cluster's nodes.
//   - status.go: Report, the registry's admin endpoint and its metrics.
package registry
