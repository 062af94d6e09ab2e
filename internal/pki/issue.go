package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// LoadCA reads a CA's certificate and private key (PEM; the key PKCS #8,
// as WriteDev writes it) and checks that they belong together and that the
// certificate is a CA's.
func LoadCA(certPath, keyPath string) (*CA, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("pki: ca: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: ca %s: no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: ca %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: ca %s: not a CA certificate", certPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: ca key: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("pki: ca key %s: no PEM key", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: ca key %s: %w", keyPath, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("pki: ca key %s: not an ECDSA key", keyPath)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("pki: ca key %s does not belong to the certificate %s", keyPath, certPath)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(cb)}, nil
}

// NodeOptions say what WriteNode issues.
type NodeOptions struct {
	// Cluster is the cluster name the certificate carries.
	Cluster string
	// ID is the node's id.
	ID uint32
	// Hosts are the DNS names and IP addresses the certificate also
	// carries, for the admin endpoint's HTTPS.
	Hosts []string
	// Validity is how long the certificate is valid (default 1 year).
	Validity time.Duration
	// Renew replaces the node's certificate and key if they exist;
	// without it WriteNode refuses to overwrite them.
	Renew bool
}

// WriteNode issues node o.ID a certificate and key from the CA in dir
// (DevCACert, DevCAKey, as WriteDev writes them) and writes them there as
// DevNodeCert and DevNodeKey (the key with mode 0600): the certificate a
// node added to a running cluster needs, or a renewed one for a node
// whose certificate is about to expire. Each file is written whole under
// a temporary name and then renamed, so a node that reads them meanwhile
// sees the old file or the new one. It returns the paths written.
func WriteNode(dir string, o NodeOptions) ([]string, error) {
	if o.ID == 0 {
		return nil, errors.New("pki: node id 0")
	}
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	ca, err := LoadCA(filepath.Join(dir, DevCACert), filepath.Join(dir, DevCAKey))
	if err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, DevNodeCert(int(o.ID))), filepath.Join(dir, DevNodeKey(int(o.ID)))
	if !o.Renew {
		if err := refuseOverwrite(certPath, keyPath); err != nil {
			return nil, err
		}
	}
	is, err := ca.IssueNode(o.Cluster, o.ID, o.Hosts, o.Validity)
	if err != nil {
		return nil, err
	}
	return writePair(certPath, keyPath, is)
}

// refuseOverwrite returns an error if any of paths exists.
func refuseOverwrite(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("pki: %s exists; not overwriting (renew replaces it)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pki: %w", err)
		}
	}
	return nil
}

// writePair writes is's key to keyPath (mode 0600) and then its
// certificate to certPath, each with replaceFile, and returns the paths
// written.
func writePair(certPath, keyPath string, is Issued) ([]string, error) {
	// The key first: a reader of the pair between the two renames gets a
	// key that does not match the old certificate and refuses the pair,
	// rather than loading a mismatched one.
	if err := replaceFile(keyPath, is.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := replaceFile(certPath, is.CertPEM, 0o644); err != nil {
		return []string{keyPath}, err
	}
	return []string{certPath, keyPath}, nil
}

// replaceFile writes b to path through a temporary file in the same
// directory, synced, then renamed over path.
func replaceFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp) // what failed is the error to report
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}
