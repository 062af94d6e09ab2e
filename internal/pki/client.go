package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// ClientScheme is the URI scheme of client identities: a client
// certificate names namespace ns as the URI SAN paxlock-client:<ns> (an
// opaque URI, so that every valid namespace is one, case kept).
const ClientScheme = "paxlock-client"

// ClientURI returns the identity URI of a client of namespace ns.
func ClientURI(ns string) *url.URL {
	return &url.URL{Scheme: ClientScheme, Opaque: ns}
}

// ClientNamespaces returns the namespaces cert names as ClientURIs, in
// the order it carries them; URIs of the scheme that are not a valid
// namespace's are skipped.
func ClientNamespaces(cert *x509.Certificate) []string {
	var ns []string
	for _, u := range cert.URIs {
		if u.Scheme != ClientScheme || u.Host != "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
			continue
		}
		if wire.ValidateNamespace(u.Opaque) == nil {
			ns = append(ns, u.Opaque)
		}
	}
	return ns
}

// IssueClient issues a client of namespace ns a certificate (ECDSA
// P-256, for TLS client use only) carrying ClientURI(ns), valid for
// validity from now.
func (ca *CA) IssueClient(ns string, validity time.Duration) (Issued, error) {
	if err := wire.ValidateNamespace(ns); err != nil {
		return Issued{}, fmt.Errorf("pki: client certificate: %w", err)
	}
	if validity <= 0 {
		return Issued{}, fmt.Errorf("pki: client certificate: validity %v", validity)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "paxlock client (" + ns + ")"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{ClientURI(ns)},
	}
	return ca.issue(tmpl, validity, "client "+ns)
}

// DevClientCert and DevClientKey name the certificate and key files
// WriteClient writes for a client of namespace ns.
func DevClientCert(ns string) string { return "client-" + ns + ".crt" }

// DevClientKey names the private key file of a client of namespace ns;
// see DevClientCert.
func DevClientKey(ns string) string { return "client-" + ns + ".key" }

// ClientOptions say what WriteClient issues.
type ClientOptions struct {
	// Namespace is the namespace the certificate names.
	Namespace string
	// Validity is how long the certificate is valid (default 1 year).
	Validity time.Duration
	// Renew replaces the certificate and key if they exist; without it
	// WriteClient refuses to overwrite them.
	Renew bool
}

// WriteClient issues a client of namespace o.Namespace a certificate and
// key from the CA in dir (DevCACert, DevCAKey) and writes them there as
// DevClientCert and DevClientKey (the key with mode 0600), each whole
// under a temporary name and then renamed, as WriteNode does. It returns
// the paths written.
func WriteClient(dir string, o ClientOptions) ([]string, error) {
	if err := wire.ValidateNamespace(o.Namespace); err != nil {
		return nil, fmt.Errorf("pki: client certificate: %w", err)
	}
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	ca, err := LoadCA(filepath.Join(dir, DevCACert), filepath.Join(dir, DevCAKey))
	if err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, DevClientCert(o.Namespace)), filepath.Join(dir, DevClientKey(o.Namespace))
	if !o.Renew {
		if err := refuseOverwrite(certPath, keyPath); err != nil {
			return nil, err
		}
	}
	is, err := ca.IssueClient(o.Namespace, o.Validity)
	if err != nil {
		return nil, err
	}
	return writePair(certPath, keyPath, is)
}
