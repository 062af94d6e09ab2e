package pki

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DevOptions say what WriteDev generates.
type DevOptions struct {
	// Cluster is the cluster name the node certificates carry.
	Cluster string
	// Nodes is the number of node certificates (ids 1 to Nodes).
	Nodes int
	// Hosts are the DNS names and IP addresses every node certificate
	// also carries, for the admin endpoint's HTTPS.
	Hosts []string
	// Validity is how long the certificates are valid.
	Validity time.Duration
}

// Dev file names under WriteDev's directory.
const (
	DevCACert     = "ca.crt"
	DevCAKey      = "ca.key"
	DevAdminToken = "admin.token"
	DevGossipKey  = "gossip.key"
)

// DevNodeCert and DevNodeKey name node id's files under WriteDev's
// directory.
func DevNodeCert(id int) string { return fmt.Sprintf("node%d.crt", id) }

// DevNodeKey names node id's private key file; see DevNodeCert.
func DevNodeKey(id int) string { return fmt.Sprintf("node%d.key", id) }

// WriteDev creates dir (mode 0700) and writes a development cluster's
// security material into it: a CA (DevCACert, DevCAKey), a certificate
// and key per node (DevNodeCert, DevNodeKey), a random admin bearer token
// (DevAdminToken, 32 bytes in hex) and a random gossip key (DevGossipKey,
// 32 bytes in base64). Keys and the token are written with mode 0600. It
// refuses to overwrite a file that exists, so existing material is never
// replaced by accident. It returns the paths written.
func WriteDev(dir string, o DevOptions) ([]string, error) {
	if o.Nodes <= 0 {
		return nil, errors.New("pki: dev: need at least one node")
	}
	if err := ValidCluster(o.Cluster); err != nil {
		return nil, err
	}
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	names := []string{DevCACert, DevCAKey, DevAdminToken, DevGossipKey}
	for i := 1; i <= o.Nodes; i++ {
		names = append(names, DevNodeCert(i), DevNodeKey(i))
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return nil, fmt.Errorf("pki: dev: %s exists; not overwriting (remove the directory to start over)", filepath.Join(dir, n))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("pki: dev: %w", err)
		}
	}
	ca, err := NewCA("paxlock development CA ("+o.Cluster+")", o.Validity)
	if err != nil {
		return nil, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{DevCACert: ca.CertPEM, DevCAKey: caKey}
	for i := 1; i <= o.Nodes; i++ {
		is, err := ca.IssueNode(o.Cluster, uint32(i), o.Hosts, o.Validity)
		if err != nil {
			return nil, err
		}
		files[DevNodeCert(i)], files[DevNodeKey(i)] = is.CertPEM, is.KeyPEM
	}
	var tok, gk [32]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("pki: dev: %w", err)
	}
	if _, err := rand.Read(gk[:]); err != nil {
		return nil, fmt.Errorf("pki: dev: %w", err)
	}
	files[DevAdminToken] = []byte(hex.EncodeToString(tok[:]) + "\n")
	files[DevGossipKey] = []byte(base64.StdEncoding.EncodeToString(gk[:]) + "\n")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: dev: %w", err)
	}
	var written []string
	for _, n := range names {
		mode := os.FileMode(0o600)
		if filepath.Ext(n) == ".crt" {
			mode = 0o644
		}
		p := filepath.Join(dir, n)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return written, fmt.Errorf("pki: dev: %w", err)
		}
		_, err = f.Write(files[n])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return written, fmt.Errorf("pki: dev: %w", err)
		}
		written = append(written, p)
	}
	return written, nil
}
