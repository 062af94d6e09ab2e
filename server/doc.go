// Package server is one paxlock node. It wires the parts together: the
// node's Pebble store (paxos/pebblestore), the peer transport
// (paxos/tcpnet), the replicas of every Paxos group on one host loop
// (paxos/host), and the lock service applied on them (group). It serves
// clients over the binary protocol (goroutines on Go's netpoller, or gnet's
// event loops; TLS on a listener of its own), forwards or redirects
// requests to group masters, publishes the cluster view, gossips
// membership for placement (internal/gossip), and serves the admin API
// (adminapi), metrics and the web console.
package server
