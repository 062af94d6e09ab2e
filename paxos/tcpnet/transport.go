package tcpnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/paxos"
)

// Defaults of Config's tuning fields.
const (
	// DefaultMaxQueueBytes is the default cap on bytes queued per peer.
	DefaultMaxQueueBytes = 8 << 20
	// DefaultMaxFrameSize is the default cap on one encoded message. The
	// largest message the protocol sends is a Promise or a LearnReply: it
	// carries log entries up to paxos.Config.MaxMsgBytes (4 MiB by default,
	// counted with Value.Size) plus the one entry that crosses it, at most
	// one batch (MaxBatchBytes, 1 MiB, plus 64 bytes). An encoded entry
	// takes at most 55 bytes plus len(cmd)+5 per command, where Value.Size
	// counts 24 plus len(cmd)+4, so at most 55/24 < 2.3 times its Size:
	// 2.3 x (4 + 1) MiB is under 11.5 MiB, plus a header of under 100
	// bytes. Snapshot chunks (host.ReplicaConfig.SnapshotChunk, 1 MiB, plus the
	// one key/value pair that crosses it) and Accepts (one batch each) are
	// far below. 16 MiB leaves room above that worst case (which
	// TestMaxFrameSizeCoversLargestMessage builds: 9.5 MiB).
	DefaultMaxFrameSize = 16 << 20
	// DefaultDialTimeout is the default bound on one connection attempt.
	DefaultDialTimeout = time.Second
	// DefaultWriteTimeout is the default bound on one coalesced write.
	DefaultWriteTimeout = 5 * time.Second
	// DefaultIdleTimeout is the default bound on an inbound connection's
	// silence after its handshake. An honest peer that has nothing to
	// send is closed too, and dials again when it has: that costs a dial,
	// and the cap keeps connections nobody uses from holding descriptors.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConnsPerPeer is the default bound on inbound connections
	// that claim one node id. An honest peer has one, and a second for a
	// moment when it redials before this side saw the old one fail.
	DefaultMaxConnsPerPeer = 4
	// DefaultMaxInbound is the default bound on inbound connections in
	// all, handshakes under way included.
	DefaultMaxInbound = 1024
	// DefaultMaxHandshakes is the default bound on inbound handshakes
	// (TLS and the node id frame) under way at once.
	DefaultMaxHandshakes = 64
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

// Config configures New.
type Config struct {
	// Self is this node's id; messages to Self are handed to Handler
	// directly.
	Self paxos.NodeID
	// Listen is the host:port to listen on ("127.0.0.1:0" picks a port;
	// Addr reports it).
	Listen string
	// Peers maps peer ids to addresses; SetPeer adds or changes them later.
	Peers map[paxos.NodeID]string
	// Handler receives decoded messages addressed to Self, in batches. It
	// is called concurrently from the transport's reader goroutines (one per
	// inbound connection) and, for messages to Self, synchronously from
	// Send; so it must be safe for concurrent use, must not block long and
	// must not call back into the sender synchronously. It owns the slice
	// it is given; decoded messages share no memory with the transport,
	// while messages to Self share Entries and Chunk with Send's caller.
	// Nil: bound later with SetHandler (a Host's Deliver, once the host
	// that takes this transport in its config exists); until then
	// received messages are dropped, as the network may drop them.
	Handler func(msgs []paxos.Message)
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
	Admit func(id paxos.NodeID, incarnation uint64) error
	// Refused, if set, is told when a peer this node dialed refused the
	// connection with a reason (its Admit, or another cluster's name).
	// It must not block.
	Refused func(peer paxos.NodeID, reason string)

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
	// IdleTimeout closes an inbound connection that sends nothing for
	// this long after its handshake (0: DefaultIdleTimeout; negative:
	// never).
	IdleTimeout time.Duration
	// MaxConnsPerPeer bounds the inbound connections that claim one node
	// id: a further one closes the oldest of them, so that a peer that
	// redials is never locked out by connections it abandoned (0:
	// DefaultMaxConnsPerPeer).
	MaxConnsPerPeer int
	// MaxInbound bounds the inbound connections in all, handshakes
	// included: beyond it a connection is closed at once and counted in
	// Stats().Refused (0: DefaultMaxInbound).
	MaxInbound int
	// MaxHandshakes bounds the inbound handshakes under way at once:
	// beyond it a connection is closed at once and counted in
	// Stats().Refused (0: DefaultMaxHandshakes).
	MaxHandshakes int
}

// Stats counts messages since the transport started.
type Stats struct {
	Sent     uint64 // written to a peer's socket
	Writes   uint64 // Write calls on peers' sockets (each carries one or more messages)
	Dropped  uint64 // never written: queue full, peer unknown or unreachable, write failed, too large
	Received uint64 // decoded from sockets and handed to Handler
	Local    uint64 // addressed to Self and handed to Handler
	Rejected uint64 // received but not addressed to Self or not from the connected peer
	Refused  uint64 // inbound connections closed at the handshake (TLS, identity or framing)
}

// Transport is a paxos.Transport over TCP. Each node dials every peer once and
// sends all its groups' messages to that peer over that one connection;
// connections a node accepts are only read from. Frames are a u32
// big-endian length followed by a paxos.AppendMessage encoding; the first frame
// on a connection is a handshake naming the dialer.
//
// Per peer, Send appends encoded frames to a bounded queue and one writer
// goroutine writes everything queued with a single Write call, so a burst
// of messages costs one syscall. The writer dials lazily, reconnects with
// exponential backoff, and discards what is queued while the peer is
// unreachable.
type Transport struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener

	ctx    context.Context // canceled by Close; aborts dials
	cancel context.CancelFunc
	wg     sync.WaitGroup

	peers atomic.Pointer[map[paxos.NodeID]*tcpPeer] // copy on write, under mu

	mu       sync.Mutex
	closed   bool // under mu; isClosed mirrors it for lock-free reads
	isClosed atomic.Bool
	inbound  map[net.Conn]struct{}
	byPeer   map[paxos.NodeID][]net.Conn // inbound connections past their handshake, oldest first

	handshakes chan struct{} // a slot per inbound handshake under way (MaxHandshakes)

	tlsServer *tls.Config // from cfg.TLS; nil: plaintext

	sent, writes, dropped, received, local, rejected, refused atomic.Uint64

	handler   atomic.Pointer[func(msgs []paxos.Message)] // cfg.Handler, or SetHandler's; nil: drop
	accepting sync.Once                                  // the accept loop, started with the first handler
}

// SetHandler binds the handler received messages go to (see
// Config.Handler), replacing any earlier one. A transport made without a
// handler accepts no inbound connection (they wait in the listen
// backlog) until the first one is bound, so neither the handler nor
// Admit is called before the program that owns them is made.
func (t *Transport) SetHandler(handler func(msgs []paxos.Message)) {
	if handler == nil {
		t.handler.Store(nil)
		return
	}
	t.handler.Store(&handler)
	t.accepting.Do(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed {
			return // Close has waited for the goroutines; start none
		}
		t.wg.Add(1)
		go t.acceptLoop()
	})
}

// deliver hands msgs to the bound handler; with none they are dropped.
func (t *Transport) deliver(msgs []paxos.Message) {
	if h := t.handler.Load(); h != nil {
		(*h)(msgs)
	}
}

// tcpPeer is the outbound side towards one peer.
type tcpPeer struct {
	t    *Transport
	id   paxos.NodeID
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
	ID paxos.NodeID
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
func (t *Transport) Peers() []PeerState {
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

// New listens on cfg.Listen at once and returns the transport.
func New(cfg Config) (*Transport, error) {
	if cfg.Self == 0 {
		return nil, errors.New("paxos: tcp transport: Self must not be 0")
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
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConnsPerPeer <= 0 {
		cfg.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if cfg.MaxInbound <= 0 {
		cfg.MaxInbound = DefaultMaxInbound
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
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
	t := &Transport{
		cfg:     cfg,
		log:     log,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		inbound: make(map[net.Conn]struct{}),
		byPeer:  make(map[paxos.NodeID][]net.Conn),

		handshakes: make(chan struct{}, cfg.MaxHandshakes),
	}
	if cfg.TLS != nil {
		t.tlsServer = cfg.TLS.ServerConfig()
	}
	empty := map[paxos.NodeID]*tcpPeer{}
	t.peers.Store(&empty)
	for id, addr := range cfg.Peers {
		t.SetPeer(id, addr)
	}
	t.SetHandler(cfg.Handler) // with one, inbound connections are served at once
	return t, nil
}

// Addr returns the address the transport listens on.
func (t *Transport) Addr() string { return t.ln.Addr().String() }

// SetPeer adds peer id at addr, or moves it there (its connection is
// re-established). Setting Self is ignored.
func (t *Transport) SetPeer(id paxos.NodeID, addr string) {
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
	next := make(map[paxos.NodeID]*tcpPeer, len(old)+1)
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
func (t *Transport) RemovePeer(id paxos.NodeID) {
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
	next := make(map[paxos.NodeID]*tcpPeer, len(old))
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
func (t *Transport) Stats() Stats {
	return Stats{
		Sent:     t.sent.Load(),
		Writes:   t.writes.Load(),
		Dropped:  t.dropped.Load(),
		Received: t.received.Load(),
		Local:    t.local.Load(),
		Rejected: t.rejected.Load(),
		Refused:  t.refused.Load(),
	}
}

// Close stops the transport: it closes the listener and every connection and
// waits for the transport's goroutines. Queued messages are dropped. Close
// is safe to call more than once.
func (t *Transport) Close() error {
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
