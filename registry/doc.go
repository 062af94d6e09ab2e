// Package registry is paxlock's standalone registry: one process that
// knows several clusters, maps each namespace to one of them and serves
// clients the cluster view of their namespace.
//
// Standalone is WLock's registry model. It follows every cluster's view
// over the wire protocol (SubscribeView on any reachable node) and serves
// the SCRAM handshake, Heartbeat, GetView and SubscribeView to clients on
// the same protocol, so a client needs only registry addresses and its
// namespace. It authenticates clients with the same code as a node
// (session.Accepted), against verifiers derived from the namespaces'
// secrets in its configuration (StandaloneConfig.Secrets).
//
// A registry never takes part in a cluster: it joins no gossip and no
// Paxos group, and what it serves is the view the cluster's nodes built.
// Node membership over gossip and the placement of group masters are in
// package internal/gossip.
package registry
