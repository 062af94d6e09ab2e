package tcpnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// newBoundedTransport is newTestTransport with cfg's bounds.
func newBoundedTransport(t *testing.T, in *tcpInbox, bounds Config) *Transport {
	t.Helper()
	bounds.Self, bounds.Listen, bounds.Handler, bounds.Logger = 1, "127.0.0.1:0", in.handle, tcpTestLogger()
	tr, err := New(bounds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// TestFrameReaderGrowsWithArrivals: a frame header declaring 15 MiB
// followed by 100 bytes costs the reader about what arrived, not the
// declared length (which a peer could send from many connections at once).
func TestFrameReaderGrowsWithArrivals(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, 15<<20)
	in = append(in, make([]byte, 100)...)
	r := frameReader{br: bufio.NewReaderSize(bytes.NewReader(in), tcpReadBufferSize), max: DefaultMaxFrameSize}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := r.next(); err == nil {
		t.Fatal("a frame cut short decoded")
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("reading 100 bytes of a frame declared 15 MiB allocated %d bytes", grew)
	}
	// A whole large frame still reads, whatever the pieces it comes in.
	m := tcpTestMessage(2, 1, 0, 7)
	m.Entries = []paxos.Entry{{Instance: 1, Value: paxos.Value{Cmds: [][]byte{make([]byte, 3<<20)}}}}
	whole := frame(paxos.AppendMessage(nil, &m))
	r = frameReader{br: bufio.NewReaderSize(bytes.NewReader(whole), tcpReadBufferSize), max: DefaultMaxFrameSize}
	got, err := r.next()
	if err != nil || got.Committed != 7 || len(got.Entries) != 1 || len(got.Entries[0].Value.Cmds[0]) != 3<<20 {
		t.Fatalf("a 3 MiB frame: %v, %+v", err, got.Entries)
	}
}

// TestIdleInboundClosed: an inbound connection that sends nothing after
// its handshake is closed after IdleTimeout.
func TestIdleInboundClosed(t *testing.T) {
	var in tcpInbox
	tr := newBoundedTransport(t, &in, Config{IdleTimeout: 200 * time.Millisecond})
	c := rawDial(t, tr, 2)
	defer c.Close()
	expectClosed(t, c, "an idle inbound connection")
}

// TestConnsPerPeerBounded: a connection claiming a node id that already
// has MaxConnsPerPeer inbound connections closes the oldest of them; the
// newest still delivers.
func TestConnsPerPeerBounded(t *testing.T) {
	var in tcpInbox
	tr := newBoundedTransport(t, &in, Config{MaxConnsPerPeer: 2})
	var cs []net.Conn
	for i := range 3 {
		c := rawDial(t, tr, 2)
		defer c.Close()
		cs = append(cs, c)
		m := tcpTestMessage(2, 1, 0, uint64(10+i))
		if _, err := c.Write(frame(paxos.AppendMessage(nil, &m))); err != nil {
			t.Fatal(err)
		}
		// Each is past its handshake before the next dials.
		testutil.Eventually(t, 30*time.Second, func() bool { return in.count() == i+1 }, "the connection's message")
	}
	expectClosed(t, cs[0], "the oldest of three connections claiming node 2")
	m := tcpTestMessage(2, 1, 0, 99)
	if _, err := cs[2].Write(frame(paxos.AppendMessage(nil, &m))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return in.count() == 4 }, "a message on the newest connection")
}

// TestHandshakesBounded: beyond MaxHandshakes connections that have not
// finished their handshake, a new one is refused at once, while those
// under way stay open until their own handshake timeout.
func TestHandshakesBounded(t *testing.T) {
	var in tcpInbox
	tr := newBoundedTransport(t, &in, Config{MaxHandshakes: 2})
	var pending []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", tr.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pending = append(pending, c)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.inbound) == 2
	}, "two handshakes under way")
	third, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	expectClosed(t, third, "a third handshake beyond MaxHandshakes 2")
	if got := tr.Stats().Refused; got != 1 {
		t.Fatalf("Refused = %d, want 1", got)
	}
	for _, c := range pending {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a pending handshake got data")
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("a handshake under way was closed: %v", err)
		}
	}
}

// TestInboundBounded: beyond MaxInbound connections a new one is
// refused at once.
func TestInboundBounded(t *testing.T) {
	var in tcpInbox
	tr := newBoundedTransport(t, &in, Config{MaxInbound: 2})
	for id := paxos.NodeID(2); id <= 3; id++ {
		c := rawDial(t, tr, id)
		defer c.Close()
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.byPeer) == 2
	}, "two peers past their handshakes")
	c := rawDial(t, tr, 4)
	defer c.Close()
	expectClosed(t, c, "a third inbound connection beyond MaxInbound 2")
}
