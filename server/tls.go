package server

import (
	"crypto/tls"
	"time"
)

// tlsHandshakeTimeout bounds a TLS connection's handshake.
const tlsHandshakeTimeout = 10 * time.Second

// clientTLSConfig is the TLS listener's configuration: the node's
// certificate, TLS 1.2 or later, and a client certificate verified
// against the cluster CA if one is sent (a relaying node's; clients send
// none).
func (s *Server) clientTLSConfig() *tls.Config {
	p := s.sec.peer
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{p.Cert},
		ClientCAs:    p.CA,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
}

// startTLS opens the TLS client listener at addr and serves it in the
// background until Shutdown.
func (s *Server) startTLS(addr string) error {
	a, err := s.startGoListener(addr, true)
	s.tlsAddr = a
	return err
}

// tlsState is tc's connection state (the zero state for nil).
func tlsState(tc *tls.Conn) tls.ConnectionState {
	if tc == nil {
		return tls.ConnectionState{}
	}
	return tc.ConnectionState()
}
