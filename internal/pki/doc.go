// Package pki holds paxlock's certificate conventions: how a node's
// certificate names its cluster and node id, how the peer transport's
// mutual TLS is configured from a cluster CA, and the generation of a
// development CA, node and client certificates (paxlockctl certs).
//
// A node certificate carries a URI subject alternative name
//
//	paxlock://<cluster>/node/<id>
//
// where <cluster> is the node's cluster_name and <id> its node_id in
// decimal. A peer connection is accepted only when the certificate chains
// to the cluster CA, names the local cluster, and names the node id the
// peer claims in the transport's handshake.
//
// A client certificate (paxlockctl certs client NAMESPACE) carries the
// URI subject alternative name
//
//	paxlock-client:<namespace>
//
// and is for TLS client use only; a node whose client_tls section sets
// bind_namespace accepts a client's session for a namespace only from a
// connection whose certificate names it.
//
// # Files by job
//
//   - pki.go: node identities (the URI scheme, ValidCluster) and the peer
//     transport's TLS configurations with their identity checks.
//   - client.go: client identities (paxlock-client:<namespace>).
//   - gen.go: a CA and the certificates it issues.
//   - issue.go: loading a CA and writing node and client certificates
//     (paxlockctl certs node, certs client).
//   - dev.go: WriteDev, a development CA with node and client files.
//   - capool.go: CA pools read from PEM files.
//   - reload.go: certificates, keys and CA files read again when their
//     contents change.
package pki
