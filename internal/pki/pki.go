package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Scheme is the URI scheme of node identities.
const Scheme = "paxlock"

// ErrIdentity is wrapped by every error about a certificate that does not
// name the expected node of the expected cluster.
var ErrIdentity = errors.New("pki: certificate identity")

// clusterRE is what a cluster name must look like to appear in a node URI
// (a host name: letters, digits, dots, dashes).
var clusterRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$`)

// ValidCluster reports whether name can be a cluster name in node
// certificates.
func ValidCluster(name string) error {
	if !clusterRE.MatchString(name) {
		return fmt.Errorf("%w: cluster name %q: want letters, digits, dots and dashes (at most 253)", ErrIdentity, name)
	}
	return nil
}

// NodeURI returns the identity URI of node id in cluster.
func NodeURI(cluster string, id uint32) *url.URL {
	return &url.URL{Scheme: Scheme, Host: strings.ToLower(cluster), Path: "/node/" + strconv.FormatUint(uint64(id), 10)}
}

// ParseNodeURI returns the cluster and node id u names, or an error
// wrapping ErrIdentity if u is not a node identity.
func ParseNodeURI(u *url.URL) (cluster string, id uint32, err error) {
	if u == nil || u.Scheme != Scheme || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Port() != "" || u.EscapedPath() != u.Path {
		return "", 0, fmt.Errorf("%w: %v is not a %s:// node URI", ErrIdentity, u, Scheme)
	}
	rest, ok := strings.CutPrefix(u.Path, "/node/")
	if !ok {
		return "", 0, fmt.Errorf("%w: %v: path is not /node/<id>", ErrIdentity, u)
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != rest {
		return "", 0, fmt.Errorf("%w: %v: bad node id", ErrIdentity, u)
	}
	if err := ValidCluster(u.Host); err != nil {
		return "", 0, err
	}
	return strings.ToLower(u.Host), uint32(n), nil
}

// NodeIdentity returns the cluster and node id cert names. A certificate
// that names none, or more than one, is an error wrapping ErrIdentity.
func NodeIdentity(cert *x509.Certificate) (cluster string, id uint32, err error) {
	found := 0
	for _, u := range cert.URIs {
		if u.Scheme != Scheme {
			continue
		}
		found++
		if cluster, id, err = ParseNodeURI(u); err != nil {
			return "", 0, err
		}
	}
	switch found {
	case 0:
		return "", 0, fmt.Errorf("%w: certificate %q names no %s:// node", ErrIdentity, cert.Subject.CommonName, Scheme)
	case 1:
		return cluster, id, nil
	default:
		return "", 0, fmt.Errorf("%w: certificate %q names %d nodes", ErrIdentity, cert.Subject.CommonName, found)
	}
}

// CheckNode returns an error wrapping ErrIdentity unless cert names node
// id of cluster (id 0: any node of cluster). It returns the id named.
func CheckNode(cert *x509.Certificate, cluster string, id uint32) (uint32, error) {
	c, n, err := NodeIdentity(cert)
	if err != nil {
		return 0, err
	}
	if !strings.EqualFold(c, cluster) {
		return 0, fmt.Errorf("%w: certificate of node %d of cluster %q, not of cluster %q", ErrIdentity, n, c, cluster)
	}
	if id != 0 && n != id {
		return 0, fmt.Errorf("%w: certificate of node %d, not of node %d", ErrIdentity, n, id)
	}
	return n, nil
}

// Files names the PEM files of a node's TLS setup.
type Files struct {
	// CA is the cluster CA's certificate (one or more PEM certificates).
	CA string `json:"ca"`
	// Cert and Key are this node's certificate (chain) and private key.
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// Peer is a node's loaded peer TLS material.
type Peer struct {
	// Cluster is the cluster name certificates must carry.
	Cluster string
	// CA holds the cluster CA; peers' certificates must chain to it.
	// Cert is this node's certificate and key. For a Peer from LoadPeer
	// both are the material as first loaded, and Current the live one
	// (re-read when the files change); the TLS configurations of
	// ServerConfig and ClientConfig use Current.
	CA   *x509.CertPool
	Cert tls.Certificate
	// live reloads the material from its files (LoadPeer); nil: CA and
	// Cert are fixed.
	live *watched[peerMaterial]
}

// LoadPeer reads f and checks that the node certificate chains to the CA
// and names node self of cluster. The Peer reads the files again when
// they change (see ReloadInterval and Current).
func LoadPeer(f Files, cluster string, self uint32) (*Peer, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, errors.New("pki: tls needs ca, cert and key")
	}
	if err := ValidCluster(cluster); err != nil {
		return nil, err
	}
	p := &Peer{Cluster: cluster}
	if err := p.watch(f, self); err != nil {
		return nil, err
	}
	return p, nil
}

// loadNode reads the CA and the node certificate of f, and checks that
// the certificate chains to the CA and names node self of cluster.
func loadNode(f Files, cluster string, self uint32) (*x509.CertPool, tls.Certificate, error) {
	pool, err := LoadCAPool(f.CA)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("pki: node certificate: %w", err)
	}
	leaf := cert.Leaf
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, tls.Certificate{}, fmt.Errorf("pki: node certificate chain: %w", err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("pki: node certificate %s does not verify against the CA %s: %w", f.Cert, f.CA, err)
	}
	if _, err := CheckNode(leaf, cluster, self); err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("pki: node certificate %s: %w", f.Cert, err)
	}
	return pool, cert, nil
}

// LoadCAPool reads a PEM file of CA certificates.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("pki: ca %s: no PEM certificate", path)
	}
	return pool, nil
}

// ServerConfig returns the TLS configuration of the peer listener: TLS
// 1.3 only, a client certificate required and verified against the
// cluster CA. The caller checks the verified certificate's identity
// (CheckNode) against the node id the peer claims.
func (p *Peer) ServerConfig() *tls.Config {
	if p.live == nil {
		return p.serverConfig(&p.Cert, p.CA)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Each handshake takes the configuration of the material in use.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return p.live.get().server, nil
		},
	}
}

func (p *Peer) serverConfig(cert *tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*cert},
		ClientCAs:    ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

// ClientConfig returns the TLS configuration for dialing peer id: TLS 1.3
// only, this node's certificate presented, and the server's certificate
// verified against the cluster CA and required to name node id of the
// cluster. Host names are not checked: the node identity replaces them,
// so certificates need no IP or DNS names for peer traffic.
func (p *Peer) ClientConfig(id uint32) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := p.Current()
			return c, nil
		},
		// InsecureSkipVerify turns off Go's own verification, which would
		// check a host name that addresses in the peer list do not carry;
		// VerifyConnection (always called) verifies the chain against the
		// cluster CA and the node identity instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return p.verifyServer(cs, id)
		},
	}
}

func (p *Peer) verifyServer(cs tls.ConnectionState, id uint32) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: peer sent no certificate", ErrIdentity)
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	_, ca := p.Current()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("peer certificate: %w", err)
	}
	_, err := CheckNode(leaf, p.Cluster, id)
	return err
}
