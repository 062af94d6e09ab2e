// Package registry is paxlock's discovery layer: node membership over
// memberlist, the compact node metadata it gossips, the master placement
// rule, and the standalone registry process that serves cluster views for
// several clusters.
//
// # Membership is a hint
//
// Membership wraps hashicorp/memberlist (SWIM with Lifeguard). Its failure
// detector is probabilistic: a node paused by GC or starved of CPU is
// suspected and declared dead while it is still running, and a node behind
// an asymmetric partition may look alive. Nothing in this package is a
// safety signal. It never decides that a lease ran out, that a master is
// gone, or that a lock may be granted; ballots, quorums and leases in
// package paxos do that. Membership tells clients where nodes listen, lets
// a node guess which groups it should master (PreferredMaster), and may
// prompt a node to start an election that Paxos then decides. It never
// carries Paxos traffic.
//
// # Metadata
//
// Every member gossips a small binary record (NodeMeta: node id, client and
// peer addresses, the groups it masters with their epochs) that must fit
// memberlist's 512-byte limit. EncodeMeta drops the group list and sets
// GroupsTruncated when it would not fit; the authoritative group→master map
// is the cluster view the nodes build from Paxos, not the gossip.
//
// # Standalone registry
//
// Standalone is WLock's registry model: one process that knows several
// clusters and maps each namespace to one of them. It follows every
// cluster's view over the wire protocol (SubscribeView on any reachable
// node) and serves the SCRAM handshake, Heartbeat, GetView and
// SubscribeView to clients on the same protocol, so a client needs only
// registry addresses and its namespace. It authenticates clients with the
// same code as a node (session.Accepted), against verifiers derived from
// the namespaces' secrets in its configuration (StandaloneConfig.Secrets).
package registry
