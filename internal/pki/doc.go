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
package pki
