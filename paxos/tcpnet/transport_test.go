package tcpnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
)

// tcpInbox collects what a transport's Handler receives.
type tcpInbox struct {
	mu    sync.Mutex
	msgs  []paxos.Message
	calls int
}

func (in *tcpInbox) handle(msgs []paxos.Message) {
	in.mu.Lock()
	in.msgs = append(in.msgs, msgs...)
	in.calls++
	in.mu.Unlock()
}

func (in *tcpInbox) snapshot() []paxos.Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]paxos.Message(nil), in.msgs...)
}

func (in *tcpInbox) count() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.msgs)
}

func tcpTestLogger() *slog.Logger { return testutil.Logger() }

func newTestTransport(t testing.TB, self paxos.NodeID, listen string, in *tcpInbox) *Transport {
	t.Helper()
	tr, err := New(Config{Self: self, Listen: listen, Handler: in.handle, Logger: tcpTestLogger()})
	if err != nil {
		t.Fatalf("NewTCPTransport(%d): %v", self, err)
	}
	return tr
}

// freeAddr returns a loopback address nobody listens on (for now).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func tcpTestMessage(from, to paxos.NodeID, g paxos.GroupID, seq uint64) paxos.Message {
	return paxos.Message{
		Type: paxos.MsgAccept, Group: g, From: from, To: to,
		Ballot: paxos.Ballot{Round: 2, Node: from}, Committed: seq,
		Entries: []paxos.Entry{{Instance: seq, Ballot: paxos.Ballot{Round: 2, Node: from},
			Value: paxos.Value{Origin: paxos.Ballot{Round: 2, Node: from}, Seq: seq, Cmds: [][]byte{[]byte(fmt.Sprintf("cmd-%d-%d-%d", from, g, seq))}}}},
	}
}

func TestTCPTransportExchange(t *testing.T) {
	var inboxes [4]tcpInbox
	var trs [4]*Transport
	for id := paxos.NodeID(1); id <= 3; id++ {
		trs[id] = newTestTransport(t, id, "127.0.0.1:0", &inboxes[id])
		defer trs[id].Close()
	}
	for id := paxos.NodeID(1); id <= 3; id++ {
		for peer := paxos.NodeID(1); peer <= 3; peer++ {
			trs[id].SetPeer(peer, trs[peer].Addr()) // Self is ignored
		}
	}
	const groups, perGroup = 15, 40
	big := paxos.Message{Type: paxos.MsgSnapshot, Group: 3, From: 1, To: 2, Instance: 99, ChunkSeq: 3, LastChunk: true, Chunk: bytes.Repeat([]byte("snapshot"), 40000)}
	want := map[paxos.NodeID][]paxos.Message{}
	var senders sync.WaitGroup
	for from := paxos.NodeID(1); from <= 3; from++ {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for seq := uint64(1); seq <= perGroup; seq++ {
				var batch []paxos.Message
				for g := paxos.GroupID(0); g < groups; g++ {
					for to := paxos.NodeID(1); to <= 3; to++ {
						batch = append(batch, tcpTestMessage(from, to, g, seq))
					}
				}
				if from == 1 && seq == perGroup/2 {
					batch = append(batch, big)
				}
				trs[from].Send(batch)
			}
		}()
		for seq := uint64(1); seq <= perGroup; seq++ {
			for g := paxos.GroupID(0); g < groups; g++ {
				for to := paxos.NodeID(1); to <= 3; to++ {
					want[to] = append(want[to], tcpTestMessage(from, to, g, seq))
				}
			}
			if from == 1 && seq == perGroup/2 {
				want[2] = append(want[2], big)
			}
		}
	}
	senders.Wait()
	for to := paxos.NodeID(1); to <= 3; to++ {
		testutil.Eventually(t, 10*time.Second, func() bool { return inboxes[to].count() >= len(want[to]) }, "node %d's messages", to)
		got := inboxes[to].snapshot()
		if len(got) != len(want[to]) {
			t.Fatalf("node %d got %d messages, want %d", to, len(got), len(want[to]))
		}
		// Per sender the order is preserved; across senders it interleaves.
		for from := paxos.NodeID(1); from <= 3; from++ {
			var g1, w1 []paxos.Message
			for _, m := range got {
				if m.From == from {
					g1 = append(g1, m)
				}
			}
			for _, m := range want[to] {
				if m.From == from {
					w1 = append(w1, m)
				}
			}
			if !reflect.DeepEqual(g1, w1) {
				t.Fatalf("node %d from %d: messages differ (%d vs %d)", to, from, len(g1), len(w1))
			}
		}
		st := trs[to].Stats()
		if st.Dropped != 0 || st.Rejected != 0 || st.Local != groups*perGroup {
			t.Errorf("node %d stats %+v", to, st)
		}
		if inboxes[to].calls >= len(got) && to != 1 {
			t.Logf("node %d: no batching (%d handler calls for %d messages)", to, inboxes[to].calls, len(got))
		}
	}
	for id := paxos.NodeID(1); id <= 3; id++ {
		if err := trs[id].Close(); err != nil {
			t.Fatal(err)
		}
		if err := trs[id].Close(); err != nil {
			t.Fatal("second Close:", err)
		}
	}
	for id := paxos.NodeID(1); id <= 3; id++ {
		// Closed: the writers are done. Each Write carries at least one
		// message, and a burst many.
		if st := trs[id].Stats(); st.Writes == 0 || st.Writes > st.Sent {
			t.Errorf("node %d: %d writes for %d messages sent", id, st.Writes, st.Sent)
		}
	}
	trs[1].Send([]paxos.Message{tcpTestMessage(1, 2, 0, 1), tcpTestMessage(1, 1, 0, 1)}) // after Close: dropped, no panic
}

func TestTCPTransportPeerDown(t *testing.T) {
	var ina, inb tcpInbox
	a := newTestTransport(t, 1, "127.0.0.1:0", &ina)
	defer a.Close()
	addrB := freeAddr(t)
	a.SetPeer(2, addrB)

	// Nobody listens at B: Send returns at once and the messages are dropped.
	start := time.Now()
	for i := uint64(0); i < 2000; i++ {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, paxos.GroupID(i%15), i)})
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Send to a dead peer took %v", d)
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return a.Stats().Dropped > 0 }, "drops")

	// B comes up: traffic flows once A's backoff lets it reconnect.
	b := newTestTransport(t, 2, addrB, &inb)
	b.SetPeer(1, a.Addr())
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, 1, 7)})
		return inb.count() > 0
	}, "delivery after B started")

	// B restarts on the same address; A notices and reconnects.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var inb2 tcpInbox
	b2 := newTestTransport(t, 2, addrB, &inb2)
	defer b2.Close()
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, 1, 8)})
		return inb2.count() > 0
	}, "delivery after B restarted")
	// And B2 reaches A.
	b2.SetPeer(1, a.Addr())
	testutil.Eventually(t, 10*time.Second, func() bool {
		b2.Send([]paxos.Message{tcpTestMessage(2, 1, 1, 9)})
		return ina.count() > 0
	}, "delivery from B2")
}

// TestTCPTransportSlowPeer: a peer that accepts but never reads fills its
// socket buffers; Send still never blocks and the queue cap drops the
// excess.
func TestTCPTransportSlowPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var hmu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c)
			hmu.Unlock()
		}
	}()
	defer func() {
		hmu.Lock()
		for _, c := range held {
			c.Close()
		}
		hmu.Unlock()
	}()
	var in tcpInbox
	a, err := New(Config{Self: 1, Listen: "127.0.0.1:0", Handler: in.handle, Logger: tcpTestLogger(),
		Peers: map[paxos.NodeID]string{2: ln.Addr().String()}, MaxQueueBytes: 256 << 10, WriteTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	m := tcpTestMessage(1, 2, 0, 1)
	m.Entries[0].Value.Cmds[0] = make([]byte, 4096)
	start := time.Now()
	for i := 0; i < 20000; i++ {
		a.Send([]paxos.Message{m})
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Send to a stalled peer took %v", d)
	}
	if st := a.Stats(); st.Dropped == 0 {
		t.Fatalf("no drops with a stalled peer: %+v", st)
	}
}

// TestTCPTransportRedialBackoff: a peer that accepts and at once closes
// every connection must not be redialed at the rate messages are sent.
func TestTCPTransportRedialBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepts atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			c.Close()
		}
	}()
	var in tcpInbox
	a, err := New(Config{Self: 1, Listen: "127.0.0.1:0", Handler: in.handle, Logger: tcpTestLogger(),
		Peers: map[paxos.NodeID]string{2: ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Each connection dies young, so each dial after the first waits a
	// backoff of tcpMinBackoff doubling: the sixth dial comes at least
	// 10+20+40+80+160 ms after the first. Without backoff all six would
	// come within a few milliseconds; a loaded machine only spaces them
	// further.
	const dials = 6
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, 0, 1)})
		return accepts.Load() >= dials
	}, "%d dials", dials)
	least := tcpMinBackoff * (1<<(dials-1) - 1)
	if d := time.Since(start); d < least {
		t.Fatalf("%d dials in %v, want them spread over at least %v", dials, d, least)
	}
}

// rawDial connects to tr and sends a handshake naming from.
func rawDial(t *testing.T, tr *Transport, from paxos.NodeID) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	hs := append([]byte{0, 0, 0, 0}, tcpMagic...)
	hs = append(hs, tcpHandshakeVersion)
	hs = binary.AppendUvarint(hs, uint64(from))
	binary.BigEndian.PutUint32(hs, uint32(len(hs)-4))
	if _, err := c.Write(hs); err != nil {
		t.Fatal(err)
	}
	return c
}

func frame(payload []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

// expectClosed asserts that the transport closes c.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		t.Fatalf("%s: connection still open (read returned data)", what)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: connection not closed", what)
	}
}

func TestTCPTransportGarbage(t *testing.T) {
	var ina, inb tcpInbox
	a := newTestTransport(t, 1, "127.0.0.1:0", &ina)
	defer a.Close()
	b := newTestTransport(t, 2, "127.0.0.1:0", &inb)
	defer b.Close()
	b.SetPeer(1, a.Addr())
	a.SetPeer(2, b.Addr())
	ping := func(seq uint64) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, func() bool {
			b.Send([]paxos.Message{tcpTestMessage(2, 1, 0, seq)})
			for _, m := range ina.snapshot() {
				if m.Committed == seq {
					return true
				}
			}
			return false
		}, "traffic between healthy peers")
	}
	ping(1)

	good := tcpTestMessage(3, 1, 0, 1)
	cases := []struct {
		name string
		send []byte
		from paxos.NodeID
	}{
		{"garbage frame", frame([]byte("this is not a message")), 3},
		{"oversized frame", []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, 3},
		{"zero-length frame", []byte{0, 0, 0, 0}, 3},
		{"truncated message", frame(paxos.AppendMessage(nil, &good)[:10]), 3},
		{"good then garbage", append(frame(paxos.AppendMessage(nil, &good)), frame([]byte{1, 99})...), 3},
	}
	for i, c := range cases {
		conn := rawDial(t, a, c.from)
		if _, err := conn.Write(c.send); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, conn, c.name)
		conn.Close()
		ping(uint64(100 + i))
	}

	// A bad handshake is refused.
	conn, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame([]byte("HELLO there"))); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, conn, "bad handshake")
	conn.Close()

	// Misaddressed or spoofed messages are dropped, but the connection
	// stays: it is a peer bug, not broken framing.
	conn = rawDial(t, a, 3)
	defer conn.Close()
	wrongTo := tcpTestMessage(3, 2, 0, 1)
	spoofed := tcpTestMessage(2, 1, 0, 1)
	fine := tcpTestMessage(3, 1, 0, 4242)
	var buf []byte
	for _, m := range []paxos.Message{wrongTo, spoofed, fine} {
		buf = append(buf, frame(paxos.AppendMessage(nil, &m))...)
	}
	if _, err := conn.Write(buf); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, m := range ina.snapshot() {
			if m.From == 3 && m.Committed == 4242 {
				return true
			}
		}
		return false
	}, "the well-addressed message")
	if st := a.Stats(); st.Rejected != 2 {
		t.Fatalf("Rejected = %d, want 2", st.Rejected)
	}
	ping(200)
}

func TestTCPTransportConfigErrors(t *testing.T) {
	if _, err := New(Config{Self: 0, Listen: "127.0.0.1:0", Handler: func([]paxos.Message) {}}); err == nil {
		t.Error("Self 0 accepted")
	}
	if _, err := New(Config{Self: 1, Listen: "256.0.0.1:bad", Handler: func([]paxos.Message) {}}); err == nil {
		t.Error("bad listen address accepted")
	}
}

// TestTCPTransportSetHandler checks that a transport made without a
// handler drops what it receives until SetHandler binds one (the host that
// takes it in its config is made after it), and then delivers.
func TestTCPTransportSetHandler(t *testing.T) {
	tr, err := New(Config{Self: 1, Listen: "127.0.0.1:0", Logger: tcpTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	self := []paxos.Message{{Type: paxos.MsgHeartbeat, From: 1, To: 1}}
	tr.Send(self) // no handler: dropped, and no panic
	var got int
	tr.SetHandler(func(msgs []paxos.Message) { got += len(msgs) })
	tr.Send(self)
	if got != 1 {
		t.Fatalf("delivered %d messages to Self after SetHandler, want 1", got)
	}
}

// TestTCPTransportCloseReleasesGoroutines checks that Close waits for every
// goroutine it started, with peers up, down and mid-reconnect.
func TestTCPTransportCloseReleasesGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	var in1, in2 tcpInbox
	a := newTestTransport(t, 1, "127.0.0.1:0", &in1)
	b := newTestTransport(t, 2, "127.0.0.1:0", &in2)
	a.SetPeer(2, b.Addr())
	a.SetPeer(3, freeAddr(t))
	b.SetPeer(1, a.Addr())
	testutil.Eventually(t, 30*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, 0, 1), tcpTestMessage(1, 3, 0, 1)})
		b.Send([]paxos.Message{tcpTestMessage(2, 1, 0, 1)})
		return in1.count() > 0 && in2.count() > 0
	}, "delivery")
	a.Close()
	b.Close()
	testutil.Eventually(t, 30*time.Second, func() bool { return runtime.NumGoroutine() <= before }, "goroutines to exit")
}

func benchTCP(b *testing.B, m paxos.Message, pk *paxostest.PKI) {
	var received atomic.Int64
	var rxTLS, txTLS *pki.Peer
	if pk != nil {
		rxTLS, txTLS = pk.Peer(2), pk.Peer(1)
	}
	rx, err := New(Config{Self: 2, Listen: "127.0.0.1:0", Logger: tcpTestLogger(), TLS: rxTLS,
		Handler: func(msgs []paxos.Message) { received.Add(int64(len(msgs))) }})
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	tx, err := New(Config{Self: 1, Listen: "127.0.0.1:0", Logger: tcpTestLogger(), TLS: txTLS,
		Handler: func([]paxos.Message) {}, Peers: map[paxos.NodeID]string{2: rx.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	const batch, window = 32, 8192
	msgs := make([]paxos.Message, batch)
	for i := range msgs {
		msgs[i] = m
	}
	testutil.Eventually(b, 30*time.Second, func() bool {
		tx.Send(msgs[:1])
		return received.Load() > 0
	}, "a warm connection")
	base := received.Load()
	b.SetBytes(int64(len(paxos.AppendMessage(nil, &m))))
	b.ResetTimer()
	start := time.Now()
	sent := 0
	for sent < b.N {
		// Bounded in flight, so the benchmark measures throughput, not drops.
		for int64(sent)-(received.Load()-base) > window {
			runtime.Gosched()
		}
		n := min(batch, b.N-sent)
		tx.Send(msgs[:n])
		sent += n
	}
	dropped := tx.Stats().Dropped
	// A fine poll, inside the timed run: a coarser wait would count its
	// oversleep against the throughput.
	for received.Load()-base+int64(dropped) < int64(b.N) {
		time.Sleep(50 * time.Microsecond)
		dropped = tx.Stats().Dropped
	}
	b.ReportMetric(float64(received.Load()-base)/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(dropped), "dropped")
}

// BenchmarkTCPTransport sends Accepts between two transports on loopback:
// a small one (one 64-byte command) and a full batch (64 commands of 64
// bytes), in plaintext and with mutual TLS.
// benchAccept is an Accept of one batch of 64 commands of 64 bytes.
func benchAccept() paxos.Message {
	cmds := make([][]byte, 64)
	for i := range cmds {
		cmds[i] = bytes.Repeat([]byte{byte(i)}, 64)
	}
	return paxos.Message{
		Type: paxos.MsgAccept, Group: 7, From: 1, To: 2,
		Ballot: paxos.Ballot{Round: 12, Node: 1}, Committed: 123456,
		Entries: []paxos.Entry{{Instance: 123457, Ballot: paxos.Ballot{Round: 12, Node: 1},
			Value: paxos.Value{Origin: paxos.Ballot{Round: 12, Node: 1}, Seq: 99, Cmds: cmds}}},
	}
}

func BenchmarkTCPTransport(b *testing.B) {
	small := tcpTestMessage(1, 2, 3, 1)
	small.Entries[0].Value.Cmds[0] = make([]byte, 64)
	full := benchAccept()
	pk := paxostest.NewPKI(b, "bench")
	b.Run("Accept1x64", func(b *testing.B) { benchTCP(b, small, nil) })
	b.Run("Accept64x64", func(b *testing.B) { benchTCP(b, full, nil) })
	b.Run("Accept1x64/tls", func(b *testing.B) { benchTCP(b, small, pk) })
	b.Run("Accept64x64/tls", func(b *testing.B) { benchTCP(b, full, pk) })
}

// TestTCPTransportPeerStates: Peers reports a link down before it is
// dialed, up with a round-trip time once traffic flows, and counts the
// connection lost when the peer goes away.
func TestTCPTransportPeerStates(t *testing.T) {
	var ina, inb tcpInbox
	a := newTestTransport(t, 1, "127.0.0.1:0", &ina)
	defer a.Close()
	b := newTestTransport(t, 2, "127.0.0.1:0", &inb)
	a.SetPeer(2, b.Addr())
	if ps := a.Peers(); len(ps) != 1 || ps[0].ID != 2 || ps[0].Up || ps[0].Ups != 0 {
		t.Fatalf("before any traffic: %+v, want peer 2 down, never up", ps)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, 1, 1)})
		ps := a.Peers()
		return inb.count() > 0 && ps[0].Up && ps[0].Ups == 1
	}, "link up")
	if runtime.GOOS == "linux" {
		if rtt := a.Peers()[0].RTT; rtt <= 0 || rtt > time.Second {
			t.Errorf("loopback RTT %v, want (0, 1s]", rtt)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.Send([]paxos.Message{tcpTestMessage(1, 2, 1, 2)})
		ps := a.Peers()
		return !ps[0].Up && ps[0].Downs >= 1 && ps[0].RTT == 0
	}, "link down")
}

// TestTCPTransportRemovePeer: after RemovePeer, messages to the peer are
// dropped, its link goes away, and messages to the other peers still flow.
func TestTCPTransportRemovePeer(t *testing.T) {
	var inboxes [4]tcpInbox
	var trs [4]*Transport
	for id := paxos.NodeID(1); id <= 3; id++ {
		trs[id] = newTestTransport(t, id, "127.0.0.1:0", &inboxes[id])
		defer trs[id].Close()
	}
	trs[1].SetPeer(2, trs[2].Addr())
	trs[1].SetPeer(3, trs[3].Addr())
	trs[1].Send([]paxos.Message{tcpTestMessage(1, 2, 0, 1), tcpTestMessage(1, 3, 0, 1)})
	testutil.Eventually(t, 10*time.Second, func() bool { return inboxes[2].count() == 1 && inboxes[3].count() == 1 }, "first messages")
	trs[1].RemovePeer(2)
	trs[1].RemovePeer(2) // twice: nothing more
	trs[1].RemovePeer(1) // self: nothing
	before := trs[1].Stats().Dropped
	trs[1].Send([]paxos.Message{tcpTestMessage(1, 2, 0, 2), tcpTestMessage(1, 3, 0, 2)})
	testutil.Eventually(t, 10*time.Second, func() bool { return inboxes[3].count() == 2 }, "node 3's second message")
	if got := trs[1].Stats().Dropped - before; got != 1 {
		t.Errorf("dropped %d messages after the removal, want 1", got)
	}
	for _, p := range trs[1].Peers() {
		if p.ID == 2 {
			t.Errorf("removed peer 2 still listed: %+v", p)
		}
	}
	if n := inboxes[2].count(); n != 1 {
		t.Errorf("removed peer got %d messages, want 1", n)
	}
}

// TestTCPTransportAdmitAndCluster: a node whose incarnation Admit refuses,
// or that names another cluster, is refused at the handshake; it is told
// why (Refused), and nothing it sends arrives. A node of the cluster with
// an admitted incarnation gets through.
func TestTCPTransportAdmitAndCluster(t *testing.T) {
	var inbox, other tcpInbox
	type refusal struct {
		peer   paxos.NodeID
		reason string
	}
	refusals := make(chan refusal, 8)
	mk := func(id paxos.NodeID, inc uint64, cluster string, in *tcpInbox) *Transport {
		tr, err := New(Config{
			Self: id, Listen: "127.0.0.1:0", Incarnation: inc, Cluster: cluster,
			Handler: in.handle, Logger: tcpTestLogger(),
			Admit: func(from paxos.NodeID, got uint64) error {
				if from == 2 && got != 22 {
					return fmt.Errorf("incarnation %d, the cluster knows %d", got, 22)
				}
				return nil
			},
			Refused: func(paxos.NodeID, string) {},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	a := mk(1, 11, "alpha", &inbox)
	wiped := mk(2, 99, "alpha", &other)
	foreign := mk(3, 33, "beta", &other)
	good := mk(2, 22, "alpha", &other)
	for _, tr := range []*Transport{wiped, foreign} {
		self := tr.cfg.Self
		tr.cfg.Refused = func(_ paxos.NodeID, reason string) { refusals <- refusal{self, reason} }
	}
	for _, tr := range []*Transport{wiped, foreign, good} {
		tr.SetPeer(1, a.Addr())
		tr.Send([]paxos.Message{tcpTestMessage(tr.cfg.Self, 1, 0, 1)})
	}
	seen := map[paxos.NodeID]string{}
	for len(seen) < 2 {
		select {
		case r := <-refusals:
			seen[r.peer] = r.reason
		case <-time.After(10 * time.Second):
			t.Fatalf("refusals heard: %v", seen)
		}
	}
	if !strings.Contains(seen[2], "incarnation 99") || !strings.Contains(seen[3], `cluster "beta"`) {
		t.Errorf("refusal reasons: %v", seen)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return inbox.count() >= 1 }, "the admitted node's message")
	// The refused connections were closed at the handshake, before any
	// frame was read: nothing of theirs can arrive later.
	for _, m := range inbox.snapshot() {
		if m.From != 2 {
			t.Errorf("a message from refused node %d arrived", m.From)
		}
	}
	if got := a.Stats().Refused; got < 2 {
		t.Errorf("refused %d connections, want 2 or more", got)
	}
}
