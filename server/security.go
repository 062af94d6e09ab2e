package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/internal/pki"
)

// security is a node's loaded security material (read once, at New).
type security struct {
	peer     *pki.Peer   // peer mTLS; nil: plaintext
	adminTLS *tls.Config // admin HTTPS; nil: plain HTTP
	// adminCert is admin_tls's own certificate (nil: the admin endpoint
	// presents the node's, or is plain HTTP). Both are read again from
	// their files when these change (pki.ReloadInterval).
	adminCert  *pki.KeyPair
	adminToken string   // "": the admin endpoint is open
	gossipKeys [][]byte // primary first; nil: gossip in clear
	// relaySecret is the cluster's relay secret ("": none), which a relay
	// proves with SCRAM when the peers run without TLS; relayVerifier is
	// its verifier, which this node checks those proofs against. Never
	// logged.
	relaySecret   string
	relayVerifier scramauth.Verifier
	// The TLS client listener's client certificates: the CAs they must
	// chain to when client_tls names client_ca (nil: the cluster CA in
	// use), whether one is required, and whether a client's session needs
	// one naming its namespace (client_tls).
	clientCAs     *pki.CAPool
	clientAuth    tls.ClientAuthType
	bindNamespace bool
}

// loadSecurity reads the certificates, keys and token cfg names, and
// warns about every channel left open.
func loadSecurity(cfg *Config, log *slog.Logger) (security, error) {
	var sec security
	if cfg.TLS != nil {
		p, err := pki.LoadPeer(*cfg.TLS, cfg.ClusterName, cfg.NodeID)
		if err != nil {
			return sec, fmt.Errorf("server: tls: %w", err)
		}
		p.OnReloadError(func(err error) {
			log.Warn("tls: a changed node certificate was not loaded; the one in use stays", "err", err)
		})
		sec.peer = p
	} else {
		log.Warn("peer transport is plaintext (no tls section): anyone who reaches the peer port can speak as any node; use it on trusted networks only")
	}
	if err := loadClientCAs(cfg, &sec, log); err != nil {
		return sec, fmt.Errorf("server: %w", err)
	}
	if a := cfg.AdminTLS; a != nil {
		// Validate: no cert and key means the node's, which is set.
		get := sec.peer.GetCertificate
		if a.Cert != "" {
			kp, err := pki.LoadKeyPair(a.Cert, a.Key)
			if err != nil {
				return sec, fmt.Errorf("server: admin_tls: %w", err)
			}
			kp.OnReloadError(func(err error) {
				log.Warn("admin_tls: a changed certificate was not loaded; the one in use stays", "err", err)
			})
			sec.adminCert, get = kp, kp.GetCertificate
		}
		sec.adminTLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: get}
	}
	tok, err := cfg.adminToken()
	if err != nil {
		return sec, fmt.Errorf("server: %w", err)
	}
	sec.adminToken = tok
	if cfg.AdminAddr != "" && tok == "" {
		log.Warn("admin endpoint has no token (admin_token_file or " + adminapi.TokenEnv + "): anyone who reaches it can change namespaces and read profiles")
	}
	if cfg.AdminAddr != "" && sec.adminTLS == nil && tok != "" {
		log.Warn("admin endpoint is plain HTTP: its bearer token crosses the network in clear (set admin_tls)")
	}
	if sec.gossipKeys, err = cfg.gossipKeys(); err != nil {
		return sec, fmt.Errorf("server: %w", err)
	}
	if sec.relaySecret, err = cfg.relaySecret(); err != nil {
		return sec, fmt.Errorf("server: %w", err)
	}
	if sec.relaySecret != "" {
		if sec.relayVerifier, err = scramauth.NewVerifier(sec.relaySecret); err != nil {
			return sec, fmt.Errorf("server: relay secret: %w", err)
		}
	} else if sec.peer == nil {
		log.Warn("no peer TLS and no relay secret (relay_secret_file or " + RelaySecretEnv + "): this node neither relays clients' requests to masters nor accepts relays; it redirects instead, and a client that cannot reach a group's master cannot use it")
	}
	if cfg.self().Gossip != "" && sec.gossipKeys == nil {
		log.Warn("gossip is not encrypted (no gossip_key): anyone who reaches the gossip port can join and read it")
	}
	return sec, nil
}
