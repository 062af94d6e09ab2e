package tcpnet

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
)

func newTLSTransport(t testing.TB, id paxos.NodeID, p *pki.Peer, in *tcpInbox, log *slog.Logger) *Transport {
	t.Helper()
	if log == nil {
		log = tcpTestLogger()
	}
	tr, err := New(Config{Self: id, Listen: "127.0.0.1:0", Handler: in.handle, Logger: log, TLS: p})
	if err != nil {
		t.Fatalf("NewTCPTransport(%d): %v", id, err)
	}
	return tr
}

// tlsDialAs connects to tr over TLS presenting cert (none if nil), then
// sends the handshake claiming node `claim` and msgs. Errors past the TCP
// connect are ignored: a refused connection may fail at any step.
func tlsDialAs(t *testing.T, tr *Transport, cert *tls.Certificate, claim paxos.NodeID, msgs ...paxos.Message) net.Conn {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} // the attacker does not care who the server is
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	raw, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_ = c.Handshake()
	_ = c.SetDeadline(time.Time{})
	hs := append([]byte{0, 0, 0, 0}, tcpMagic...)
	hs = append(hs, tcpHandshakeVersion)
	hs = binary.AppendUvarint(hs, uint64(claim))
	binary.BigEndian.PutUint32(hs, uint32(len(hs)-4))
	for i := range msgs {
		hs = append(hs, frame(paxos.AppendMessage(nil, &msgs[i]))...)
	}
	_, _ = c.Write(hs)
	return c
}

func TestTCPTransportTLSExchange(t *testing.T) {
	pk := paxostest.NewPKI(t, "alpha")
	var ina, inb tcpInbox
	a := newTLSTransport(t, 1, pk.Peer(1), &ina, nil)
	defer a.Close()
	b := newTLSTransport(t, 2, pk.Peer(2), &inb, nil)
	defer b.Close()
	a.SetPeer(2, b.Addr())
	b.SetPeer(1, a.Addr())
	a.Send([]paxos.Message{tcpTestMessage(1, 2, 0, 7)})
	b.Send([]paxos.Message{tcpTestMessage(2, 1, 0, 8)})
	testutil.Eventually(t, 10*time.Second, func() bool { return ina.count() == 1 && inb.count() == 1 }, "messages both ways over mTLS")
	if got := inb.snapshot()[0]; got.From != 1 || got.Committed != 7 {
		t.Fatalf("b got %+v", got)
	}
	if st := a.Stats(); st.Refused != 0 {
		t.Fatalf("a refused %d connections", st.Refused)
	}
}

// TestTCPTransportTLSRefused: a process without a certificate, with one
// from another CA, with one of another cluster, or with a valid
// certificate of node 2 that claims to be node 3, is refused on the peer
// port (and logged), and nothing it sent reaches the handler; node 3 with
// its own certificate gets through, but not a message it sends as node 2.
func TestTCPTransportTLSRefused(t *testing.T) {
	pk := paxostest.NewPKI(t, "alpha")
	other := paxostest.NewPKI(t, "alpha") // another CA, same cluster name
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var in tcpInbox
	a := newTLSTransport(t, 1, pk.Peer(1), &in, log)
	defer a.Close()

	// Plaintext, the pre-TLS protocol, claiming node 3.
	plain := rawDial(t, a, 3)
	m := tcpTestMessage(3, 1, 0, 1)
	_, _ = plain.Write(frame(paxos.AppendMessage(nil, &m)))
	expectClosed(t, plain, "plaintext peer")
	plain.Close()

	node2 := pk.Cert("alpha", 2)
	foreign := other.Cert("alpha", 3)
	otherCluster := pk.Cert("beta", 3)
	cases := []struct {
		name string
		cert *tls.Certificate
		why  string // in the log line
	}{
		{"no certificate", nil, "certificate"},
		{"certificate of another CA", &foreign, "certificate"},
		{"certificate of another cluster", &otherCluster, `cluster \"beta\"`},
		{"node 2's certificate claiming node 3", &node2, "not of node 3"},
	}
	for i, c := range cases {
		conn := tlsDialAs(t, a, c.cert, 3, tcpTestMessage(3, 1, 0, uint64(10+i)))
		expectClosed(t, conn, c.name)
		conn.Close()
		want := i + 2
		testutil.Eventually(t, 30*time.Second, func() bool { return a.Stats().Refused == uint64(want) }, "%s counted as refused", c.name)
		if !strings.Contains(logs.String(), c.why) {
			t.Errorf("%s: log does not say %q:\n%s", c.name, c.why, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "peer connection refused"); n != len(cases)+1 {
		t.Errorf("%d refusals logged, want %d:\n%s", n, len(cases)+1, logs.String())
	}
	if !strings.Contains(logs.String(), "remote=127.0.0.1:") {
		t.Errorf("refusals do not name the remote address:\n%s", logs.String())
	}

	// Node 3 with its own certificate is accepted; a message it sends
	// in node 2's name is rejected, and its own is the first and only
	// message the handler ever sees.
	good := pk.Cert("alpha", 3)
	conn := tlsDialAs(t, a, &good, 3, tcpTestMessage(2, 1, 0, 98), tcpTestMessage(3, 1, 0, 99))
	defer conn.Close()
	testutil.Eventually(t, 30*time.Second, func() bool { return in.count() > 0 }, "node 3's message")
	if got := in.snapshot(); len(got) != 1 || got[0].Committed != 99 {
		t.Fatalf("handler got %+v, want only node 3's message 99", got)
	}
	if st := a.Stats(); st.Refused != uint64(len(cases)+1) || st.Received != 1 || st.Rejected != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTCPTransportTLSDialVerifiesPeer: a node dials only the node it
// means: a server whose (valid) certificate names another node gets
// nothing.
func TestTCPTransportTLSDialVerifiesPeer(t *testing.T) {
	pk := paxostest.NewPKI(t, "alpha")
	var ina, inb tcpInbox
	a := newTLSTransport(t, 1, pk.Peer(1), &ina, nil)
	defer a.Close()
	b := newTLSTransport(t, 2, pk.Peer(2), &inb, nil)
	defer b.Close()
	a.SetPeer(3, b.Addr()) // node 2 listens where a expects node 3
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 3, 0, 1)})
		return a.Stats().Dropped >= 3
	}, "a to give up on the impostor")
	if inb.count() != 0 || a.Stats().Sent != 0 {
		t.Fatalf("impostor got %d messages, a sent %d", inb.count(), a.Stats().Sent)
	}
}

// FuzzReadHandshake: the peer handshake decoder never panics, accepts only
// what it says (a node id that round-trips), and reads at most its frame.
func FuzzReadHandshake(f *testing.F) {
	good := append([]byte{0, 0, 0, 0}, tcpMagic...)
	good = append(good, tcpHandshakeVersion)
	good = binary.AppendUvarint(good, 3)
	binary.BigEndian.PutUint32(good, uint32(len(good)-4))
	f.Add(good)
	f.Add([]byte{0, 0, 0, 6, 'P', 'X', 'L', 'K', 1, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(appendHandshake(nil, peerHello{id: 7, incarnation: 1 << 60, cluster: "alpha"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		h, err := readHello(r)
		if err != nil {
			return
		}
		if h.id == 0 {
			t.Fatal("node id 0 accepted")
		}
		n := int(binary.BigEndian.Uint32(b))
		if n > maxHandshake || len(b) < 4+n {
			t.Fatalf("accepted a frame of %d bytes from %d", n, len(b))
		}
		if want := appendHandshake(nil, h); !bytes.Equal(want, b[:4+n]) {
			t.Fatalf("%+v from a frame that does not re-encode: %x", h, b[:4+n])
		}
	})
}

// TestMaxFrameSizeCoversLargestMessage checks DefaultMaxFrameSize's
// derivation: the worst Promise or LearnReply the core can build (entries
// whose Value.Size sums to Config.MaxMsgBytes, each as small as a Value
// gets with every varint at its longest, so that encoding inflates Size the
// most, plus one entry carrying a full batch) fits one frame.
func TestMaxFrameSizeCoversLargestMessage(t *testing.T) {
	var c paxos.Config
	c.EnsureDefaults()
	big := paxos.Ballot{Round: math.MaxUint64, Node: math.MaxUint32}
	m := paxos.Message{Type: paxos.MsgLearnReply, Group: math.MaxUint32, From: math.MaxUint32, To: math.MaxUint32, Ballot: big, Hint: big,
		Instance: math.MaxUint64, Committed: math.MaxUint64, LogStart: math.MaxUint64, Tick: math.MaxUint64}
	size := 0
	for size+(paxos.Value{}).Size() <= c.MaxMsgBytes {
		e := paxos.Entry{Instance: math.MaxUint64 - uint64(len(m.Entries)), Ballot: big, Value: paxos.Value{Origin: big, Seq: math.MaxUint64}}
		m.Entries = append(m.Entries, e)
		size += e.Value.Size()
	}
	batch := paxos.Value{Origin: big, Seq: math.MaxUint64, Cmds: [][]byte{make([]byte, c.MaxBatchBytes-64)}}
	m.Entries = append(m.Entries, paxos.Entry{Instance: math.MaxUint64, Ballot: big, Value: batch})
	n := len(paxos.AppendMessage(nil, &m))
	t.Logf("worst message: %d entries, Value.Size %d, encoded %d bytes (%.1f MiB), frame limit %d MiB", len(m.Entries), size+batch.Size(), n, float64(n)/(1<<20), DefaultMaxFrameSize>>20)
	if n > DefaultMaxFrameSize {
		t.Fatalf("worst message encodes in %d bytes, over DefaultMaxFrameSize %d", n, DefaultMaxFrameSize)
	}
}
