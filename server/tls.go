package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

// tlsHandshakeTimeout bounds a TLS connection's handshake.
const tlsHandshakeTimeout = 10 * time.Second

// clientTLSConfig is the TLS listener's configuration: the node's
// certificate in use (re-read when renewed: pki.Peer.Current), TLS 1.2 or later, and a client certificate verified
// against the cluster CA (a relaying node's) and the client_tls section's
// client_ca: verified if one is sent, required with client_auth
// "required".
func (s *Server) clientTLSConfig() *tls.Config {
	p := s.sec.peer
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: p.GetCertificate,
		ClientCAs:      s.sec.clientCAs,
		ClientAuth:     s.sec.clientAuth,
	}
}

// validateClientTLS reports what is wrong with the client_tls section.
func (c *Config) validateClientTLS() []error {
	ct := c.ClientTLS
	if ct == nil {
		return nil
	}
	var errs []error
	switch ct.ClientAuth {
	case "", ClientAuthNone:
		if ct.BindNamespace {
			errs = append(errs, fmt.Errorf("client_tls: bind_namespace needs client_auth %q or %q", ClientAuthOptional, ClientAuthRequired))
		}
	case ClientAuthOptional, ClientAuthRequired:
		if ct.ClientCA == "" {
			errs = append(errs, fmt.Errorf("client_tls: client_auth %q needs client_ca, the CA that signs client certificates", ct.ClientAuth))
		}
	default:
		errs = append(errs, fmt.Errorf("client_tls: client_auth %q is none of %q, %q and %q", ct.ClientAuth, ClientAuthNone, ClientAuthOptional, ClientAuthRequired))
	}
	if c.self().ClientTLS == "" {
		errs = append(errs, errors.New("client_tls: this node has no client_tls_addr (its entry in nodes), the listener client certificates are for"))
	}
	return errs
}

// loadClientCAs sets the TLS listener's client certificate pool and
// policy in sec: the cluster CA (relaying nodes' certificates) and, with
// client_auth optional or required, client_ca's certificates.
func loadClientCAs(cfg *Config, sec *security) error {
	sec.clientAuth = tls.VerifyClientCertIfGiven
	if sec.peer != nil {
		sec.clientCAs = sec.peer.CA
	}
	ct := cfg.ClientTLS
	if ct == nil || ct.ClientAuth == "" || ct.ClientAuth == ClientAuthNone {
		return nil
	}
	if cfg.TLS == nil {
		return errors.New("client_tls: client certificates are asked for on the TLS client listener, which needs the tls section")
	}
	caPEM, err := os.ReadFile(cfg.TLS.CA)
	if err != nil {
		return fmt.Errorf("tls: ca: %w", err)
	}
	clientPEM, err := os.ReadFile(ct.ClientCA)
	if err != nil {
		return fmt.Errorf("client_tls: client_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(clientPEM) {
		return fmt.Errorf("client_tls: client_ca %s: no PEM certificate", ct.ClientCA)
	}
	pool.AppendCertsFromPEM(caPEM)
	sec.clientCAs = pool
	if ct.ClientAuth == ClientAuthRequired {
		sec.clientAuth = tls.RequireAndVerifyClientCert
	}
	sec.bindNamespace = ct.BindNamespace
	return nil
}

// verifiesAsNode reports whether the verified client certificate of cs
// chains to the cluster CA: a node's identity is the cluster CA's to
// vouch for, never client_ca's, which may be another organisation's.
func (s *Server) verifiesAsNode(cs tls.ConnectionState) bool {
	p := s.sec.peer
	if p == nil || len(cs.PeerCertificates) == 0 {
		return false
	}
	if s.sec.clientCAs == p.CA {
		return true // the handshake verified it against the cluster CA alone
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: p.CA, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// certNames reports whether the connection's verified client certificate
// names namespace ns (pki.ClientNamespaces).
func (c *conn) certNames(ns string) bool {
	return slices.Contains(c.certNamespaces, ns)
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
