package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
)

// tlsHandshakeTimeout bounds a TLS connection's handshake.
const tlsHandshakeTimeout = 10 * time.Second

// clientTLSConfig is the TLS listener's configuration: the node's
// certificate in use (re-read when renewed: pki.Peer.Current), TLS 1.2 or
// later, and a client certificate verified against the CA pool in use
// (clientCAPool: the cluster CA, for a relaying node's, and the client_tls
// section's client_ca, both re-read when their files change): verified if
// one is sent, required with client_auth "required". Each handshake takes
// the configuration of the pool in use, built once per pool so that
// session resumption works between changes.
func (s *Server) clientTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.clientTLSFor(s.clientCAPool()), nil
		},
	}
}

// clientTLSCached is the TLS listener's configuration for one CA pool.
type clientTLSCached struct {
	pool *x509.CertPool
	conf *tls.Config
}

// clientTLSFor returns the TLS listener's configuration verifying client
// certificates against pool.
func (s *Server) clientTLSFor(pool *x509.CertPool) *tls.Config {
	if c := s.clientTLS.Load(); c != nil && c.pool == pool {
		return c.conf
	}
	var get func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	if p := s.sec.peer; p != nil {
		get = p.GetCertificate
	}
	c := &clientTLSCached{pool: pool, conf: &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: get,
		ClientCAs:      pool,
		ClientAuth:     s.sec.clientAuth,
	}}
	s.clientTLS.Store(c)
	return c.conf
}

// clientCAPool is the pool the TLS listener verifies client certificates
// against now: client_ca's certificates with the cluster CA's when the
// client_tls section names one, else the cluster CA's alone.
func (s *Server) clientCAPool() *x509.CertPool {
	if s.sec.clientCAs != nil {
		return s.sec.clientCAs.Pool()
	}
	if p := s.sec.peer; p != nil {
		_, ca := p.Current()
		return ca
	}
	return nil
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

// loadClientCAs sets the TLS listener's client certificate policy in
// sec and, with client_auth optional or required, its CA pool: client_ca's
// certificates and the cluster CA's (relaying nodes' certificates), read
// again when either file changes. Without it the listener verifies a
// certificate sent against the cluster CA in use (Server.clientCAPool).
func loadClientCAs(cfg *Config, sec *security, log *slog.Logger) error {
	sec.clientAuth = tls.VerifyClientCertIfGiven
	ct := cfg.ClientTLS
	if ct == nil || ct.ClientAuth == "" || ct.ClientAuth == ClientAuthNone {
		return nil
	}
	if cfg.TLS == nil {
		return errors.New("client_tls: client certificates are asked for on the TLS client listener, which needs the tls section")
	}
	pool, err := pki.LoadCAPools(ct.ClientCA, cfg.TLS.CA)
	if err != nil {
		return fmt.Errorf("client_tls: client_ca: %w", err)
	}
	pool.OnReloadError(func(err error) {
		log.Warn("client_tls: a changed client_ca or cluster CA file was not loaded; the client CA pool in use stays", "err", err)
	})
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
	if s.sec.clientCAs == nil {
		return true // the handshake verified it against the cluster CA alone
	}
	_, ca := p.Current()
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
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
