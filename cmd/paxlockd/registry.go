// This file is the registry role: its configuration file and its run.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/registry"
	"github.com/paxlock/paxlock/server"
)

// MetaSecretEnv holds the registry namespace's secret of the meta
// cluster (over meta.secret_file).
const MetaSecretEnv = "PAXLOCK_META_SECRET"

// registryConfig is the standalone registry's configuration file.
type registryConfig struct {
	Listen     string              `json:"listen"`
	Clusters   map[string][]string `json:"clusters,omitempty"`
	Namespaces map[string]string   `json:"namespaces,omitempty"`
	// Secrets holds each namespace's secret: clients authenticate to the
	// registry with SCRAM as to a node (see registry.StandaloneConfig).
	Secrets map[string]string `json:"secrets,omitempty"`
	// Meta, instead of the three tables above, takes them from a meta
	// cluster.
	Meta *metaConfig `json:"meta,omitempty"`
	// AdminListen serves /status and /metrics.
	AdminListen string `json:"admin_listen,omitempty"`
	// AdminTokenFile holds the bearer token of the lock clusters' admin
	// endpoints, where the registry installs namespaces' verifiers
	// (PAXLOCK_ADMIN_TOKEN takes precedence); the registry's own
	// admin_listen endpoint requires it too.
	AdminTokenFile string `json:"admin_token_file,omitempty"`
	// AdminAllowedHosts are further host names admin_listen answers to
	// (see registry.StandaloneConfig.AdminAllowedHosts).
	AdminAllowedHosts []string `json:"admin_allowed_hosts,omitempty"`
}

// metaConfig is the file's meta section.
type metaConfig struct {
	Addrs     []string `json:"addrs"`
	Namespace string   `json:"namespace"`
	// SecretFile holds the namespace's secret (PAXLOCK_META_SECRET takes
	// precedence).
	SecretFile string `json:"secret_file,omitempty"`
	// TLS connects to the meta nodes' TLS client listeners.
	TLS *metaTLS `json:"tls,omitempty"`
	// Admin lists the meta nodes' admin addresses: with it the registry
	// takes part in driving namespace moves, recording each step there
	// with the admin token of admin_token_file. AdminCA is the PEM CA
	// file of their admin HTTPS (unset: plain HTTP).
	Admin   []string `json:"admin,omitempty"`
	AdminCA string   `json:"admin_ca,omitempty"`
}

// metaTLS is the CA that verifies the meta nodes, and a client
// certificate where they bind the registry namespace to one.
type metaTLS struct {
	CA         string `json:"ca"`
	Cert       string `json:"cert,omitempty"`
	Key        string `json:"key,omitempty"`
	ServerName string `json:"server_name,omitempty"`
}

// loadRegistryConfig reads a standalone registry's configuration; unknown
// keys are an error naming them.
func loadRegistryConfig(path string) (registryConfig, error) {
	var rc registryConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return rc, fmt.Errorf("registry config: %w", err)
	}
	if err := server.DecodeStrict(b, &rc); err != nil {
		return rc, fmt.Errorf("registry config %s: %w", path, err)
	}
	return rc, nil
}

// secretFrom returns env's value if set, else file's content (trimmed).
func secretFrom(env, file, what string) (string, error) {
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v, nil
	}
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// registryStandalone reads the configuration file path, with -meta
// overriding meta.addrs, into the registry's configuration.
func registryStandalone(path, metaFlag string, log *slog.Logger) (registry.StandaloneConfig, error) {
	rc, err := loadRegistryConfig(path)
	if err != nil {
		return registry.StandaloneConfig{}, err
	}
	sc := registry.StandaloneConfig{Listen: rc.Listen, Clusters: rc.Clusters, Namespaces: rc.Namespaces, Secrets: rc.Secrets,
		AdminListen: rc.AdminListen, AdminAllowedHosts: rc.AdminAllowedHosts, Logger: log}
	if sc.AdminToken, err = secretFrom(adminapi.TokenEnv, rc.AdminTokenFile, "admin_token_file"); err != nil {
		return sc, err
	}
	if metaFlag != "" {
		if rc.Meta == nil {
			rc.Meta = &metaConfig{}
		}
		rc.Meta.Addrs = strings.Split(metaFlag, ",")
	}
	if rc.Meta == nil {
		return sc, nil
	}
	m := &registry.MetaConfig{Addrs: rc.Meta.Addrs, Namespace: rc.Meta.Namespace, Admin: rc.Meta.Admin}
	if m.Secret, err = secretFrom(MetaSecretEnv, rc.Meta.SecretFile, "meta.secret_file"); err != nil {
		return sc, err
	}
	if rc.Meta.AdminCA != "" {
		ca, err := os.ReadFile(rc.Meta.AdminCA)
		if err != nil {
			return sc, fmt.Errorf("meta.admin_ca: %w", err)
		}
		m.AdminCA = string(ca)
	}
	if t := rc.Meta.TLS; t != nil {
		if m.TLS, err = metaTLSConfig(t); err != nil {
			return sc, err
		}
	}
	sc.Meta = m
	return sc, nil
}

func metaTLSConfig(t *metaTLS) (*tls.Config, error) {
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("meta.tls.ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("meta.tls.ca: no PEM certificate")
	}
	c := &tls.Config{RootCAs: pool, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.Cert != "" || t.Key != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("meta.tls cert and key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func runRegistry(path, meta string, log *slog.Logger) error {
	sc, err := registryStandalone(path, meta, log)
	if err != nil {
		return err
	}
	reg, err := registry.NewStandalone(sc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = reg.Start(ctx)
	cancel()
	if err != nil {
		return err
	}
	log.Info("registry serving", "listen", reg.Addr().String(), "meta", sc.Meta != nil)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return reg.Shutdown(ctx)
}
