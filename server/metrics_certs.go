package server

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"
)

// certCollector reports when each certificate this node presents stops
// being valid (paxlock_tls_certificate_expiry_timestamp_seconds, by use:
// peer for the mutual TLS between nodes and the TLS client listener,
// admin for the admin endpoint's HTTPS when it has its own), so that an
// alert fires before one lapses: a node whose certificate expired can
// neither reach its peers nor be reached. The certificates are read at
// scrape time from the ones in use, so a renewed certificate the node
// reloaded (pki.ReloadInterval) shows at once.
type certCollector struct {
	desc  *prometheus.Desc
	certs map[string]func() *x509.Certificate
}

func newCertCollector(s *Server) *certCollector {
	c := &certCollector{
		desc: prometheus.NewDesc("paxlock_tls_certificate_expiry_timestamp_seconds",
			"When the certificate this node presents for a use (peer, admin) stops being valid, in seconds since the Unix epoch.",
			[]string{"use"}, nil),
		certs: map[string]func() *x509.Certificate{},
	}
	if p := s.sec.peer; p != nil {
		c.certs["peer"] = func() *x509.Certificate {
			cert, _ := p.Current()
			return leafOf(*cert)
		}
	}
	if a := s.sec.adminCert; a != nil {
		c.certs["admin"] = func() *x509.Certificate { return leafOf(*a.Certificate()) }
	}
	return c
}

// leafOf returns cert's leaf, parsed if tls did not keep it.
func leafOf(cert tls.Certificate) *x509.Certificate {
	if cert.Leaf != nil {
		return cert.Leaf
	}
	if len(cert.Certificate) == 0 {
		return nil
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

// Describe sends the collector's one family.
func (c *certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect sends each certificate's expiry.
func (c *certCollector) Collect(ch chan<- prometheus.Metric) {
	for use, leaf := range c.certs {
		if cert := leaf(); cert != nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), use)
		}
	}
}
