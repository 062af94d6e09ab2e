// This file is what the API (package apiserver) needs of a node: a
// client connection served in-process, the namespaces' verifiers, and the
// TLS settings of the client listener.

package server

import (
	"crypto/tls"
	"errors"
	"net"

	"github.com/paxlock/paxlock/client/scramauth"
)

// ErrShutDown reports a node that is shutting down.
var ErrShutDown = errors.New("server: shut down")

// ServeLocal serves nc, one end of an in-process connection (net.Pipe),
// as a client connection of the plain client port: the same handshake,
// bounds (max_conns, max_inflight, the namespace's sessions, waits and
// watches), translation to the lock service's requests, redirects and
// relays as for a socket. certNamespaces are the namespaces a verified
// client certificate of whoever the connection serves names, for
// client_tls bind_namespace (nil: none). It returns at once; nc is
// served in the background until it closes or the node shuts down.
func (s *Server) ServeLocal(nc net.Conn, certNamespaces []string) error {
	lc := &localConn{Conn: nc, namespaces: certNamespaces}
	if !s.goBackground(func() { s.serveGoConn(lc, false) }) {
		_ = nc.Close()
		return ErrShutDown
	}
	return nil
}

// localConn is a connection ServeLocal serves, with the namespaces its
// caller's certificate names.
type localConn struct {
	net.Conn
	namespaces []string
}

// Verifier returns namespace ns's SCRAM verifier from the replicated
// namespace table; false if the namespace does not exist.
func (s *Server) Verifier(ns string) (scramauth.Verifier, bool) { return s.credentials(ns) }

// BindsNamespaces reports whether client certificates are bound to
// namespaces (client_tls bind_namespace): a session is then accepted
// only from a connection whose certificate names its namespace.
func (s *Server) BindsNamespaces() bool { return s.sec.bindNamespace }

// ClientTLSConfig is the TLS client listener's configuration (the node's
// certificate, the client certificate policy of client_tls), or nil when
// the node has no certificate (no tls section: its client port is
// plaintext).
func (s *Server) ClientTLSConfig() *tls.Config {
	if s.sec.peer == nil {
		return nil
	}
	return s.clientTLSConfig()
}

// NodeID is the node's id, which the API's routing hints name
// (apiserver.NodeIdentity).
func (s *Server) NodeID() uint32 { return s.cfg.NodeID }

// ConnBounds are the bounds of one client connection: max_inflight,
// max_waits_per_conn and max_watches_per_conn (apiserver.NodeBounds).
func (s *Server) ConnBounds() (maxInflight, maxWaits, maxWatches int) {
	return s.cfg.MaxInflight, s.cfg.MaxWaitsPerConn, s.cfg.MaxWatchesPerConn
}

// ConnPrefixWatches is one client connection's bound on prefix-watch
// places, max_prefix_watches_per_conn (apiserver.NodePrefixBounds).
func (s *Server) ConnPrefixWatches() int { return s.cfg.MaxPrefixWatchesPerConn }
