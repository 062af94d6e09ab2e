package paxos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
)

// Transport delivers messages between the replicas of every group on a
// node; the Host sends through it and is its handler (Host.Deliver).
// *TCPTransport and MemNetwork's endpoints implement it.
type Transport interface {
	// Send hands msgs to their nodes, a message to this node included
	// (to the handler, like any other). It never blocks on a slow or dead
	// peer: it may drop any message (Paxos tolerates loss), but it never
	// alters one. It may be called concurrently, and must not keep msgs
	// after it returns (the Host reuses the slice); it may keep the
	// messages' Entries and Chunk, which neither side modifies.
	Send(msgs []Message)
	// Close stops the transport: queued messages are dropped, nothing
	// more is delivered, and a later Send drops its messages.
	Close() error
}

// Defaults of TCPTransportConfig's tuning fields.
const (
	// DefaultMaxQueueBytes is the default cap on bytes queued per peer.
	DefaultMaxQueueBytes = 8 << 20
	// DefaultMaxFrameSize is the default cap on one encoded message. The
	// largest message the protocol sends is a Promise or a LearnReply: it
	// carries log entries up to Config.MaxMsgBytes (4 MiB by default,
	// counted with Value.Size) plus the one entry that crosses it, at most
	// one batch (MaxBatchBytes, 1 MiB, plus 64 bytes). An encoded entry
	// takes at most 55 bytes plus len(cmd)+5 per command, where Value.Size
	// counts 24 plus len(cmd)+4, so at most 55/24 < 2.3 times its Size:
	// 2.3 x (4 + 1) MiB is under 11.5 MiB, plus a header of under 100
	// bytes. Snapshot chunks (ReplicaConfig.SnapshotChunk, 1 MiB, plus the
	// one key/value pair that crosses it) and Accepts (one batch each) are
	// far below. 16 MiB leaves room above that worst case (which
	// TestMaxFrameSizeCoversLargestMessage builds: 9.5 MiB).
	DefaultMaxFrameSize = 16 << 20
	// DefaultDialTimeout is the default bound on one connection attempt.
	DefaultDialTimeout = time.Second
	// DefaultWriteTimeout is the default bound on one coalesced write.
	DefaultWriteTimeout = 5 * time.Second
)

const (
	tcpMinBackoff       = 10 * time.Millisecond
	tcpMaxBackoff       = time.Second
	tcpHandshakeTimeout = 5 * time.Second // the TLS handshake and the node id frame, inbound
	tcpReadBufferSize   = 64 << 10
	tcpMaxBatch         = 256     // messages per Handler call
	tcpKeepBuffer       = 1 << 20 // larger idle buffers are released
	tcpHandshakeVersion = 2       // 2: MsgSnapshot has fields of its own
)

// tcpMagic opens the handshake frame.
var tcpMagic = []byte("PXLK")

// TCPTransportConfig configures NewTCPTransport.
type TCPTransportConfig struct {
	// Self is this node's id; messages to Self are handed to Handler
	// directly.
	Self NodeID
	// Listen is the host:port to listen on ("127.0.0.1:0" picks a port;
	// Addr reports it).
	Listen string
	// Peers maps peer ids to addresses; SetPeer adds or changes them later.
	Peers map[NodeID]string
	// Handler receives decoded messages addressed to Self, in batches. It
	// is called concurrently from the transport's reader goroutines (one per
	// inbound connection) and, for messages to Self, synchronously from
	// Send; so it must be safe for concurrent use, must not block long and
	// must not call back into the sender synchronously. It owns the slice
	// it is given; decoded messages share no memory with the transport,
	// while messages to Self share Entries and Chunk with Send's caller.
	Handler func(msgs []Message)
	// Logger receives connection events; nil means slog.Default().
	Logger *slog.Logger
	// TLS, if set, makes every peer connection mutual TLS 1.3 under the
	// cluster CA it holds: a connection is accepted only from a peer whose
	// certificate chains to that CA and names this cluster and the node id
	// the peer claims in its handshake (pki.CheckNode), and a dialed peer
	// must present the certificate of the node dialed. Connections refused
	// are logged (remote address, reason) and counted in Stats().Refused;
	// nothing they sent reaches Handler. Nil means plaintext TCP, for
	// trusted networks only: anyone who reaches the port can then speak as
	// any node.
	TLS *pki.Peer
	// Incarnation identifies this node's data directory (0: none); the
	// handshake carries it, and Admit on the other side may refuse it.
	Incarnation uint64
	// Cluster, if set, is this cluster's name: the handshake carries it,
	// and an inbound connection that names another cluster is refused
	// (one that names none, from a node without it, is let in).
	Cluster string
	// Admit, if set, is asked about every inbound connection once its
	// handshake is read (peer id and the incarnation it sent, 0 if none): an
	// error refuses the connection, and its text is written back to the
	// dialer before the connection closes (the dialer's Refused hears it).
	// It runs on the connection's reader goroutine and must not block.
	Admit func(id NodeID, incarnation uint64) error
	// Refused, if set, is told when a peer this node dialed refused the
	// connection with a reason (its Admit, or another cluster's name).
	// It must not block.
	Refused func(peer NodeID, reason string)

	// MaxQueueBytes caps the encoded bytes queued for one peer; messages
	// that would exceed it are dropped (0: DefaultMaxQueueBytes).
	MaxQueueBytes int
	// MaxFrameSize caps one encoded message, sent or received; a peer that
	// announces a bigger frame is disconnected (0: DefaultMaxFrameSize).
	MaxFrameSize int
	// DialTimeout bounds one connection attempt (0: DefaultDialTimeout).
	DialTimeout time.Duration
	// WriteTimeout bounds one coalesced write; a peer that does not drain
	// its socket within it is disconnected (0: DefaultWriteTimeout).
	WriteTimeout time.Duration
}

// TransportStats counts messages since the transport started.
type TransportStats struct {
	Sent     uint64 // written to a peer's socket
	Writes   uint64 // Write calls on peers' sockets (each carries one or more messages)
	Dropped  uint64 // never written: queue full, peer unknown or unreachable, write failed, too large
	Received uint64 // decoded from sockets and handed to Handler
	Local    uint64 // addressed to Self and handed to Handler
	Rejected uint64 // received but not addressed to Self or not from the connected peer
	Refused  uint64 // inbound connections closed at the handshake (TLS, identity or framing)
}

// TCPTransport is a Transport over TCP. Each node dials every peer once and
// sends all its groups' messages to that peer over that one connection;
// connections a node accepts are only read from. Frames are a u32
// big-endian length followed by an AppendMessage encoding; the first frame
// on a connection is a handshake naming the dialer.
//
// Per peer, Send appends encoded frames to a bounded queue and one writer
// goroutine writes everything queued with a single Write call, so a burst
// of messages costs one syscall. The writer dials lazily, reconnects with
// exponential backoff, and discards what is queued while the peer is
// unreachable.
type TCPTransport struct {
	cfg TCPTransportConfig
	log *slog.Logger
	ln  net.Listener

	ctx    context.Context // canceled by Close; aborts dials
	cancel context.CancelFunc
	wg     sync.WaitGroup

	peers atomic.Pointer[map[NodeID]*tcpPeer] // copy on write, under mu

	mu       sync.Mutex
	closed   bool // under mu; isClosed mirrors it for lock-free reads
	isClosed atomic.Bool
	inbound  map[net.Conn]struct{}

	tlsServer *tls.Config // from cfg.TLS; nil: plaintext

	sent, writes, dropped, received, local, rejected, refused atomic.Uint64
}

// tcpPeer is the outbound side towards one peer.
type tcpPeer struct {
	t    *TCPTransport
	id   NodeID
	wake chan struct{} // capacity 1: work queued or address changed
	quit chan struct{} // closed by RemovePeer: the writer ends
	tls  *tls.Config   // dialing this peer; nil: plaintext

	mu      sync.Mutex
	addr    string
	addrGen uint64
	pending []byte // encoded frames not yet taken by the writer
	npend   int    // messages in pending
	conn    net.Conn

	ups, downs atomic.Uint64 // connections established and lost
}

// PeerState is the transport's link to one peer, for metrics.
type PeerState struct {
	ID NodeID
	// Up says the outbound connection to the peer is established.
	Up bool
	// Ups and Downs count the connections established and lost since
	// the transport started.
	Ups, Downs uint64
	// RTT is the kernel's smoothed round-trip time of the connection
	// (TCP_INFO on Linux); 0 when down or not known on this platform.
	RTT time.Duration
}

// Peers returns the state of the links to the peers, by id. It takes
// each peer's lock briefly and makes one getsockopt per connected peer:
// call it at scrape time, not per message.
func (t *TCPTransport) Peers() []PeerState {
	peers := *t.peers.Load()
	out := make([]PeerState, 0, len(peers))
	for id, p := range peers {
		p.mu.Lock()
		c := p.conn
		p.mu.Unlock()
		ps := PeerState{ID: id, Up: c != nil, Ups: p.ups.Load(), Downs: p.downs.Load()}
		if c != nil {
			ps.RTT = connRTT(c)
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PeerState) int { return int(a.ID) - int(b.ID) })
	return out
}

// NewTCPTransport listens on cfg.Listen at once and returns the transport.
func NewTCPTransport(cfg TCPTransportConfig) (*TCPTransport, error) {
	if cfg.Self == 0 {
		return nil, errors.New("paxos: tcp transport: Self must not be 0")
	}
	if cfg.Handler == nil {
		return nil, errors.New("paxos: tcp transport: Handler is nil")
	}
	if cfg.MaxQueueBytes <= 0 {
		cfg.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	cfg.MaxFrameSize = min(cfg.MaxFrameSize, math.MaxInt32) // it must fit the u32 length
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "transport", "self", cfg.Self)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("paxos: tcp transport: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCPTransport{
		cfg:     cfg,
		log:     log,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		inbound: make(map[net.Conn]struct{}),
	}
	if cfg.TLS != nil {
		t.tlsServer = cfg.TLS.ServerConfig()
	}
	empty := map[NodeID]*tcpPeer{}
	t.peers.Store(&empty)
	for id, addr := range cfg.Peers {
		t.SetPeer(id, addr)
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Addr returns the address the transport listens on.
func (t *TCPTransport) Addr() string { return t.ln.Addr().String() }

// SetPeer adds peer id at addr, or moves it there (its connection is
// re-established). Setting Self is ignored.
func (t *TCPTransport) SetPeer(id NodeID, addr string) {
	if id == t.cfg.Self || id == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p, ok := (*t.peers.Load())[id]; ok {
		p.mu.Lock()
		if p.addr != addr {
			p.addr = addr
			p.addrGen++
		}
		p.mu.Unlock()
		p.signal()
		return
	}
	p := &tcpPeer{t: t, id: id, addr: addr, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	if t.cfg.TLS != nil {
		p.tls = t.cfg.TLS.ClientConfig(uint32(id))
	}
	old := *t.peers.Load()
	next := make(map[NodeID]*tcpPeer, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[id] = p
	t.peers.Store(&next)
	t.wg.Add(1)
	go p.run()
}

// RemovePeer forgets peer id (a node removed from the cluster): its queued
// messages are dropped, its outbound connection is closed and its writer
// ends; later messages to it are dropped like those to any unknown peer.
// Removing Self or an unknown peer does nothing. SetPeer may add the id
// again (the cluster never does: a removed id is not reused).
func (t *TCPTransport) RemovePeer(id NodeID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	old := *t.peers.Load()
	p, ok := old[id]
	if !ok {
		return
	}
	next := make(map[NodeID]*tcpPeer, len(old))
	for k, v := range old {
		if k != id {
			next[k] = v
		}
	}
	t.peers.Store(&next)
	close(p.quit)
	p.mu.Lock()
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.mu.Unlock()
	t.dropped.Add(uint64(p.discard()))
}

// Stats returns the transport's counters.
func (t *TCPTransport) Stats() TransportStats {
	return TransportStats{
		Sent:     t.sent.Load(),
		Writes:   t.writes.Load(),
		Dropped:  t.dropped.Load(),
		Received: t.received.Load(),
		Local:    t.local.Load(),
		Rejected: t.rejected.Load(),
		Refused:  t.refused.Load(),
	}
}

// Send queues msgs for their peers (by To) and returns without waiting for
// any socket. Messages to Self are handed to Handler before Send returns
// (their Entries and Chunk are shared with the caller, so neither side may
// modify them). Messages for unknown peers, or that do not fit a peer's
// queue, are dropped.
func (t *TCPTransport) Send(msgs []Message) {
	if t.isClosed.Load() {
		t.dropped.Add(uint64(len(msgs)))
		return
	}
	peers := *t.peers.Load()
	nself := 0
	var last *tcpPeer
	for i := range msgs {
		m := &msgs[i]
		if m.To == t.cfg.Self {
			nself++
			continue
		}
		p := peers[m.To]
		if p == nil {
			t.dropped.Add(1)
			continue
		}
		if last != nil && last != p {
			last.signal()
		}
		last = p
		p.enqueue(m)
	}
	if last != nil {
		last.signal()
	}
	if nself == 0 {
		return
	}
	local := make([]Message, 0, nself)
	for i := range msgs {
		if msgs[i].To == t.cfg.Self {
			local = append(local, msgs[i])
		}
	}
	t.local.Add(uint64(nself))
	t.cfg.Handler(local)
}

// enqueue appends m's frame to p's queue, or drops it.
func (p *tcpPeer) enqueue(m *Message) {
	t := p.t
	p.mu.Lock()
	start := len(p.pending)
	p.pending = append(p.pending, 0, 0, 0, 0)
	p.pending = AppendMessage(p.pending, m)
	n := len(p.pending) - start - 4
	// One message may exceed the queue cap on an empty queue, but never the
	// frame limit.
	if n > t.cfg.MaxFrameSize || (start > 0 && len(p.pending) > t.cfg.MaxQueueBytes) {
		p.pending = p.pending[:start]
		p.mu.Unlock()
		t.dropped.Add(1)
		if n > t.cfg.MaxFrameSize {
			t.log.Error("message exceeds frame limit; dropped", "peer", p.id, "type", m.Type, "group", m.Group, "bytes", n)
		}
		return
	}
	binary.BigEndian.PutUint32(p.pending[start:], uint32(n))
	p.npend++
	p.mu.Unlock()
}

func (p *tcpPeer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run is p's writer goroutine. It dials when there is something to send,
// waits an exponential backoff (tcpMinBackoff to tcpMaxBackoff) before each
// dial that follows a failed dial or a connection that died young, and
// discards what is queued whenever a dial fails.
func (p *tcpPeer) run() {
	t := p.t
	defer t.wg.Done()
	var (
		conn    net.Conn
		dead    *atomic.Bool // set when the peer closed conn
		gen     uint64       // p.addrGen that conn was dialed for
		since   time.Time    // when conn was established
		buf     []byte       // the writer's half of the double buffer
		wait    time.Duration
		failing bool // the last dial failed (log only transitions)
	)
	// drop closes conn; one that dies young delays the next dial.
	drop := func() {
		p.dropConn(conn)
		conn = nil
		if time.Since(since) < tcpMaxBackoff {
			wait = nextBackoff(wait)
		} else {
			wait = 0
		}
	}
	defer func() {
		if conn != nil {
			p.dropConn(conn)
		}
	}()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-p.quit:
			return
		case <-p.wake:
		}
		p.mu.Lock()
		addr, curGen, queued := p.addr, p.addrGen, p.npend
		p.mu.Unlock()
		if conn != nil && (gen != curGen || dead.Load()) {
			drop()
		}
		if queued == 0 {
			continue
		}
		if conn == nil {
			if wait > 0 {
				select {
				case <-t.ctx.Done():
					return
				case <-p.quit:
					return
				case <-time.After(wait):
				}
			}
			c, err := p.dial(addr)
			if err != nil {
				n := p.discard()
				t.dropped.Add(uint64(n))
				if !failing {
					t.log.Warn("peer unreachable; dropping its messages while retrying", "peer", p.id, "addr", addr, "err", err)
				} else {
					t.log.Debug("dial failed", "peer", p.id, "addr", addr, "err", err, "dropped", n)
				}
				failing = true
				wait = nextBackoff(wait)
				p.signal() // retry (after wait) if more gets queued
				continue
			}
			if failing {
				t.log.Info("peer reachable again", "peer", p.id, "addr", addr)
			}
			failing = false
			if !p.setConn(c) {
				_ = c.Close()
				return
			}
			conn, gen, since = c, curGen, time.Now()
			dead = new(atomic.Bool)
			t.wg.Add(1)
			go p.watch(c, dead)
		}
		p.mu.Lock()
		buf, p.pending = p.pending, buf[:0]
		n := p.npend
		p.npend = 0
		p.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		_ = conn.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
		t.writes.Add(1)
		if _, err := conn.Write(buf); err != nil {
			t.dropped.Add(uint64(n))
			if t.ctx.Err() == nil {
				t.log.Warn("write to peer failed; reconnecting", "peer", p.id, "addr", addr, "err", err)
			}
			drop()
			p.signal() // reconnect if more is queued
		} else {
			t.sent.Add(uint64(n))
		}
		if cap(buf) > tcpKeepBuffer {
			buf = nil // release the memory of a burst
		}
	}
}

func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return tcpMinBackoff
	}
	return min(2*d, tcpMaxBackoff)
}

// dial connects to addr, with TLS verifies that the peer is node p.id of
// the cluster, and sends the handshake.
func (p *tcpPeer) dial(addr string) (net.Conn, error) {
	t := p.t
	d := net.Dialer{Timeout: t.cfg.DialTimeout}
	c, err := d.DialContext(t.ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if p.tls != nil {
		tc := tls.Client(c, p.tls)
		ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	hs := appendHandshake(make([]byte, 0, 64), peerHello{id: t.cfg.Self, incarnation: t.cfg.Incarnation, cluster: t.cfg.Cluster})
	_ = c.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
	if _, err := c.Write(hs); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	return c, nil
}

// watch reads from an outbound connection, which the peer writes to only
// to say why it refuses it (tcpRefusal and a line), so that a peer closing
// it is noticed before the next write is lost on it.
func (p *tcpPeer) watch(c net.Conn, dead *atomic.Bool) {
	defer p.t.wg.Done()
	b, _ := io.ReadAll(io.LimitReader(c, 1024))
	if reason, ok := bytes.CutPrefix(b, tcpRefusal); ok {
		p.t.log.Error("peer refused this node", "peer", p.id, "reason", string(bytes.TrimSpace(reason)))
		if f := p.t.cfg.Refused; f != nil {
			f(p.id, string(bytes.TrimSpace(reason)))
		}
	}
	_, _ = io.Copy(io.Discard, c)
	dead.Store(true)
	p.signal()
}

// setConn records the writer's connection so Close can interrupt it; false
// means the transport is closing or the peer was removed.
func (p *tcpPeer) setConn(c net.Conn) bool {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	if p.t.closed {
		return false
	}
	select {
	case <-p.quit: // removed while dialing
		return false
	default:
	}
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
	p.ups.Add(1)
	return true
}

func (p *tcpPeer) dropConn(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
		p.downs.Add(1)
	}
	p.mu.Unlock()
}

// discard empties p's queue and returns how many messages it held.
func (p *tcpPeer) discard() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.npend
	p.pending = p.pending[:0]
	if cap(p.pending) > tcpKeepBuffer {
		p.pending = nil
	}
	p.npend = 0
	return n
}

func (t *TCPTransport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: wait and retry.
			t.log.Error("accept failed; retrying", "err", err)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		t.inbound[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serve(c)
	}
}

// serve reads frames from one inbound connection until it fails.
func (t *TCPTransport) serve(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		_ = c.Close()
		t.mu.Lock()
		delete(t.inbound, c)
		t.mu.Unlock()
	}()
	remote := c.RemoteAddr().String()
	_ = c.SetReadDeadline(time.Now().Add(tcpHandshakeTimeout))
	br, from, err := t.handshake(c)
	var refusal *refusedError
	if errors.As(err, &refusal) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(append(append(append([]byte(nil), tcpRefusal...), refusal.reason...), '\n'))
	}
	if err != nil {
		if t.ctx.Err() == nil {
			// Logged before it is counted: whoever sees the count (a
			// test) finds the line.
			t.log.Warn("peer connection refused", "remote", remote, "err", err)
			t.refused.Add(1)
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	log := t.log.With("peer", from, "remote", remote)
	log.Debug("inbound connection")
	r := frameReader{br: br, max: t.cfg.MaxFrameSize}
	for {
		m, err := r.next()
		if err != nil {
			t.logReadError(log, err)
			return
		}
		batch := make([]Message, 0, 8)
		batch = t.admit(batch, &m, from)
		// Everything already buffered joins the same Handler call.
		for len(batch) < tcpMaxBatch && r.ready() {
			if m, err = r.next(); err != nil {
				break
			}
			batch = t.admit(batch, &m, from)
		}
		if len(batch) > 0 {
			t.received.Add(uint64(len(batch)))
			t.cfg.Handler(batch)
		}
		if err != nil {
			t.logReadError(log, err)
			return
		}
	}
}

// handshake runs the TLS handshake if TLS is on, reads the node id frame
// and, with TLS, checks that the verified certificate names that node of
// this cluster. It returns the reader of the frames that follow (through
// TLS if on) and the peer's node id.
func (t *TCPTransport) handshake(c net.Conn) (*bufio.Reader, NodeID, error) {
	var r io.Reader = c
	var tc *tls.Conn
	if t.tlsServer != nil {
		tc = tls.Server(c, t.tlsServer)
		ctx, cancel := context.WithTimeout(t.ctx, tcpHandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("tls handshake: %w", err)
		}
		r = tc
	}
	br := bufio.NewReaderSize(r, tcpReadBufferSize)
	hello, err := readHello(br)
	if err != nil {
		return nil, 0, err
	}
	from := hello.id
	if tc != nil {
		cs := tc.ConnectionState()
		if len(cs.PeerCertificates) == 0 { // RequireAndVerifyClientCert makes this unreachable
			return nil, 0, fmt.Errorf("%w: no client certificate", pki.ErrIdentity)
		}
		if _, err := pki.CheckNode(cs.PeerCertificates[0], t.cfg.TLS.Cluster, uint32(from)); err != nil {
			return nil, 0, fmt.Errorf("claims node %d: %w", from, err)
		}
	}
	if hello.cluster != "" && t.cfg.Cluster != "" && hello.cluster != t.cfg.Cluster {
		return nil, 0, &refusedError{fmt.Sprintf("node %d of cluster %q dialed a node of cluster %q", from, hello.cluster, t.cfg.Cluster)}
	}
	if t.cfg.Admit != nil {
		if err := t.cfg.Admit(from, hello.incarnation); err != nil {
			return nil, 0, &refusedError{fmt.Sprintf("node %d: %v", from, err)}
		}
	}
	return br, from, nil
}

// tcpRefusal opens what a node writes back on a connection it refuses
// after reading its handshake, followed by the reason and a newline.
var tcpRefusal = []byte("PXLK-REFUSED ")

// refusedError is a handshake refused for a reason the dialer is told.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return "refused: " + e.reason }

// peerHello is what a handshake says: the dialer's id, its data
// directory's incarnation and its cluster's name (both optional).
type peerHello struct {
	id          NodeID
	incarnation uint64
	cluster     string
}

// maxHelloCluster bounds the cluster name in a handshake.
const maxHelloCluster = 64

// appendHandshake appends the handshake frame:
//
//	u32 len | "PXLK" | version | uvarint id [| uvarint incarnation | uvarint len | cluster]
//
// The optional part is written when either is set (a cluster name longer
// than maxHelloCluster is cut).
func appendHandshake(dst []byte, h peerHello) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, tcpMagic...)
	dst = append(dst, tcpHandshakeVersion)
	dst = binary.AppendUvarint(dst, uint64(h.id))
	if h.incarnation != 0 || h.cluster != "" {
		c := h.cluster[:min(len(h.cluster), maxHelloCluster)]
		dst = binary.AppendUvarint(dst, h.incarnation)
		dst = binary.AppendUvarint(dst, uint64(len(c)))
		dst = append(dst, c...)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// admit appends m to batch if it is addressed to this node by the peer that
// connected.
func (t *TCPTransport) admit(batch []Message, m *Message, from NodeID) []Message {
	if m.To != t.cfg.Self || m.From != from {
		t.rejected.Add(1)
		return batch
	}
	return append(batch, *m)
}

func (t *TCPTransport) logReadError(log *slog.Logger, err error) {
	switch {
	case t.ctx.Err() != nil:
	case errors.Is(err, io.EOF):
		log.Debug("inbound connection closed")
	case errors.Is(err, ErrCorrupt):
		log.Warn("peer broke framing; closing its connection", "err", err)
	default:
		log.Info("inbound connection failed", "err", err)
	}
}

// maxHandshake bounds the handshake frame after its length.
const maxHandshake = 4 + 1 + 2*binary.MaxVarintLen64 + 1 + maxHelloCluster

// readHello reads the handshake frame (see appendHandshake).
func readHello(br *bufio.Reader) (peerHello, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return peerHello{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < uint32(len(tcpMagic))+2 || n > maxHandshake {
		return peerHello{}, fmt.Errorf("%w: handshake frame of %d bytes", ErrCorrupt, n)
	}
	var buf [maxHandshake]byte
	b := buf[:n]
	if _, err := io.ReadFull(br, b); err != nil {
		return peerHello{}, err
	}
	if !bytes.Equal(b[:len(tcpMagic)], tcpMagic) {
		return peerHello{}, fmt.Errorf("%w: handshake magic %q", ErrCorrupt, b[:len(tcpMagic)])
	}
	b = b[len(tcpMagic):]
	if b[0] != tcpHandshakeVersion {
		return peerHello{}, fmt.Errorf("%w: handshake version %d", ErrCorrupt, b[0])
	}
	b = b[1:]
	id, k := minimalUvarint(b)
	if k <= 0 || id == 0 || id > 1<<32-1 {
		return peerHello{}, fmt.Errorf("%w: handshake node id", ErrCorrupt)
	}
	h := peerHello{id: NodeID(id)}
	b = b[k:]
	if len(b) == 0 {
		return h, nil
	}
	inc, k := minimalUvarint(b)
	if k <= 0 {
		return peerHello{}, fmt.Errorf("%w: handshake incarnation", ErrCorrupt)
	}
	b = b[k:]
	cl, k := minimalUvarint(b)
	if k <= 0 || cl > maxHelloCluster || uint64(len(b)-k) != cl || (inc == 0 && cl == 0) {
		return peerHello{}, fmt.Errorf("%w: handshake cluster", ErrCorrupt)
	}
	h.incarnation, h.cluster = inc, string(b[k:])
	return h, nil
}

// minimalUvarint is binary.Uvarint that also refuses a value encoded in
// more bytes than it needs (a last byte of 0 after others), so that a
// handshake has exactly one encoding: k <= 0 on any error.
func minimalUvarint(b []byte) (v uint64, k int) {
	v, k = binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, -k
	}
	return v, k
}

// frameReader reads length-prefixed message frames.
type frameReader struct {
	br      *bufio.Reader
	max     int
	scratch []byte // for frames larger than br's buffer
}

// ready reports whether a whole frame is already buffered, so that next
// will not block.
func (r *frameReader) ready() bool {
	if r.br.Buffered() < 4 {
		return false
	}
	hdr, _ := r.br.Peek(4)
	n := int(binary.BigEndian.Uint32(hdr))
	// An invalid length counts as ready: next reports it without reading.
	return n == 0 || n > r.max || r.br.Buffered()-4 >= n
}

// next reads and decodes one frame. A zero or oversized length, or a frame
// that does not decode, is an error wrapping ErrCorrupt.
func (r *frameReader) next() (Message, error) {
	hdr, err := r.br.Peek(4)
	if err != nil {
		return Message{}, err
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n == 0 || n > r.max {
		return Message{}, fmt.Errorf("%w: frame of %d bytes (limit %d)", ErrCorrupt, n, r.max)
	}
	if _, err := r.br.Discard(4); err != nil {
		return Message{}, err
	}
	if n <= r.br.Size() {
		b, err := r.br.Peek(n)
		if err != nil {
			return Message{}, unexpectedEOF(err)
		}
		m, err := DecodeMessage(b)
		_, _ = r.br.Discard(n)
		return m, err
	}
	if cap(r.scratch) < n {
		r.scratch = make([]byte, n)
	}
	b := r.scratch[:n]
	if _, err := io.ReadFull(r.br, b); err != nil {
		return Message{}, unexpectedEOF(err)
	}
	m, err := DecodeMessage(b)
	if cap(r.scratch) > tcpKeepBuffer {
		r.scratch = nil
	}
	return m, err
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Close stops the transport: it closes the listener and every connection and
// waits for the transport's goroutines. Queued messages are dropped. Close
// is safe to call more than once.
func (t *TCPTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.isClosed.Store(true)
	conns := make([]net.Conn, 0, len(t.inbound))
	for c := range t.inbound {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	t.cancel()
	err := t.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	for _, p := range *t.peers.Load() {
		p.mu.Lock()
		if p.conn != nil {
			_ = p.conn.Close()
		}
		p.mu.Unlock()
	}
	t.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("paxos: tcp transport close: %w", err)
	}
	return nil
}
