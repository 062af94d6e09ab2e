package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"math"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/paxos"
)

// nodeCertPeer mints, from the CA in certs (hostileSecureSetup's), a
// certificate of node id: what a compromised node holds.
func nodeCertPeer(t *testing.T, certs string, id uint32) *pki.Peer {
	t.Helper()
	ca, err := pki.LoadCA(filepath.Join(certs, pki.DevCACert), filepath.Join(certs, pki.DevCAKey))
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.IssueNode("paxlock", id, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := is.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return &pki.Peer{Cluster: "paxlock", CA: ca.Pool(), Cert: cert}
}

// tlsPeer returns a peerDialer that runs the peer port's mutual TLS with
// peer's certificate, and checks that the node answering is node 1.
func tlsPeer(peer *pki.Peer) peerDialer {
	return func(t *testing.T, addr string) net.Conn {
		t.Helper()
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: peer.ClientConfig(1)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("TLS to node 1's peer port: %v", err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
}

// expectPeerRefused checks that node p closes nc (what it sent was
// refused at the handshake): a read ends within a minute, and p's
// paxlock_peer_refused_total rises above before.
func expectPeerRefused(t *testing.T, c *cluster, p *proc, nc net.Conn, before float64, what string) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(time.Minute))
	// Up to the close (a TLS alert may come first): nil at EOF.
	if _, err := io.Copy(io.Discard, nc); isTimeout(err) {
		t.Fatalf("%s: the connection is still open a minute on", what)
	} else if err != nil {
		t.Logf("%s: read ends with %v", what, err)
	}
	c.waitUntil(what+" counted as refused", time.Minute, func() bool { return metric(t, p, "paxlock_peer_refused_total") > before })
}

// TestHostilePeerTLS is TestHostilePeer on a cluster whose peers run
// mutual TLS, against a peer that holds a node certificate from the
// cluster's CA. First, node 1 refuses at the handshake, with nothing the
// connection sent reaching a group (no refusal counted by the core):
// a plaintext peer (reaching the port is no longer enough), and a peer
// presenting node 3's certificate while claiming node 2 (the certificate's
// identity is bound to the claimed id). Then a peer with a certificate
// minted for node 2, the id it claims, sends the hostile messages of
// hostilePeerAttack, and every group still serves, after node 1's restart
// too.
func TestHostilePeerTLS(t *testing.T) {
	c, certs := hostileSecureSetup(t)
	p := c.procs[0]
	addr := peerAddr(t, p)
	probe := []paxos.Message{{Type: paxos.MsgAccept, Group: group.ID(1).ReplicaGroup(), From: 2, To: 1, Ballot: paxos.Ballot{Round: math.MaxUint64, Node: 2}}}

	before := metric(t, p, "paxlock_peer_refused_total")
	plain := plainPeer(t, addr)
	hostilePeer(t, plain, 2, probe)
	expectPeerRefused(t, c, p, plain, before, "a plaintext peer claiming node 2")

	before = metric(t, p, "paxlock_peer_refused_total")
	impostor := tlsPeer(nodeCertPeer(t, certs, 3))(t, addr)
	hostilePeer(t, impostor, 2, probe)
	expectPeerRefused(t, c, p, impostor, before, "node 3's certificate claiming node 2")
	if n := refusedPeerMessages(t, p, "round_jump"); n != 0 {
		t.Fatalf("a refused connection's Accept of round MaxUint64 reached a group: %v refused for round_jump", n)
	}

	hostilePeerAttack(t, c, tlsPeer(nodeCertPeer(t, certs, 2)))
}
