// Package tcpnet is the TCP transport between the nodes of a cluster
// (paxos.Transport): one connection per pair of nodes and direction
// carries the messages of every Paxos group, optionally under mutual TLS
// with the cluster's CA (internal/pki).
//
// # Files by job
//
//   - transport.go: Config, New, Transport (peers, stats, Close).
//   - send.go: the outbound side: Send, the per-peer queue and writer
//     goroutine, dialing with backoff.
//   - receive.go: the inbound side: accepting, the handshake and its TLS
//     identity check, reading frames and handing them to the handler.
//   - frame.go: the wire format: the handshake frame, refusals, message
//     frames.
//   - rtt_linux.go: the kernel's round-trip time of a connection, for
//     metrics (rtt_other.go: none elsewhere).
package tcpnet
