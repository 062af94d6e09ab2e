package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// CA is a certificate authority that can issue node certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert in PEM.
	CertPEM []byte
}

// Issued is a certificate and its key, in PEM.
type Issued struct {
	CertPEM, KeyPEM []byte
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return n, nil
}

// NewCA creates a self-signed ECDSA P-256 CA named name, valid for
// validity from now.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: ca key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: ca: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: ca: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// IssueNode issues node id of cluster a certificate (ECDSA P-256, for
// both TLS client and server use) carrying NodeURI(cluster, id) and, for
// the admin endpoint's HTTPS, the given host names and IP addresses.
func (ca *CA) IssueNode(cluster string, id uint32, hosts []string, validity time.Duration) (Issued, error) {
	if id == 0 {
		return Issued{}, errors.New("pki: node id 0")
	}
	if err := ValidCluster(cluster); err != nil {
		return Issued{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: fmt.Sprintf("paxlock node %d (%s)", id, cluster)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{NodeURI(cluster, id)},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl, validity, fmt.Sprintf("node %d", id))
}

// issue signs tmpl (its subject, usages and names) with a new ECDSA P-256
// key, a random serial and validity from an hour ago, for digital
// signatures; what names the certificate in errors.
func (ca *CA) issue(tmpl *x509.Certificate, validity time.Duration, what string) (Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: %s key: %w", what, err)
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return Issued{}, err
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: %s certificate: %w", what, err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: %s key: %w", what, err)
	}
	return Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}

// Pool returns a pool holding only ca's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// KeyPEM returns ca's private key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: ca key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

// TLSCertificate returns i as a tls.Certificate.
func (i Issued) TLSCertificate() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(i.CertPEM, i.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: %w", err)
	}
	return c, nil
}
