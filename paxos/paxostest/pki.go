package paxostest

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/paxos"
)

// PKI is a cluster CA that issues node identities in memory, for tests of
// transports that run mutual TLS.
type PKI struct {
	t       testing.TB
	ca      *pki.CA
	cluster string
}

// NewPKI returns a new CA for cluster; it fails t if it cannot make one.
func NewPKI(t testing.TB, cluster string) *PKI {
	t.Helper()
	ca, err := pki.NewCA("test CA "+cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &PKI{t: t, ca: ca, cluster: cluster}
}

// Cert issues node id of cluster (which may differ from the PKI's own).
func (p *PKI) Cert(cluster string, id paxos.NodeID) tls.Certificate {
	p.t.Helper()
	is, err := p.ca.IssueNode(cluster, uint32(id), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := is.TLSCertificate()
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// Peer returns node id's transport TLS material.
func (p *PKI) Peer(id paxos.NodeID) *pki.Peer {
	return &pki.Peer{Cluster: p.cluster, CA: p.ca.Pool(), Cert: p.Cert(p.cluster, id)}
}
