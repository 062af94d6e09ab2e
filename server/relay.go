package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// relayDialTimeout bounds the dial and the Hello of a relay connection.
const relayDialTimeout = 3 * time.Second

// maxRelayQueue bounds the bytes waiting in one relay (while it dials, or
// when the master reads slowly); beyond it requests get OVERLOADED.
const maxRelayQueue = 8 << 20

// errRelayClosed ends a relay whose client connection closed.
var errRelayClosed = errors.New("relay closed")

// errShuttingDown ends a relay of a node that is shutting down.
var errShuttingDown = errors.New("node shutting down")

// relay forwards the requests of one client connection that asked this
// node to deliver them to the master of their group (wire.Routed: the
// client was redirected too often, or cannot reach the master itself). It
// is a connection of its own to that master's client port, opened with a
// handshake that names the client's namespace, id and client key and sets
// Via, so the master serves the requests as the client's own and never
// forwards them again. It carries no namespace secret (this node has only
// the namespace's verifier, and the client proved the secret to this
// node with SCRAM): the master accepts it because the relay proves that
// it comes from a node of this cluster. When the peers use TLS, the relay
// dials the master's TLS client listener (client_tls_addr) with this
// node's certificate and says Hello; the master checks the certificate
// against the cluster CA and the node id in Via (conn.TrustRelay).
// Without peer TLS it dials the plain client port and runs SCRAM with
// Via set, proving the cluster's relay secret (conn.RelayCredentials);
// without peer TLS and without a relay secret a node opens no relays
// (relayAddr) and accepts none (see docs/design.md, security).
// Frames go through unchanged in both directions: requests keep the
// client's request ids, and replies and pushes (Granted, Lost, WatchEvent)
// come back to the client connection byte for byte. One relay per client
// connection and master keeps request, wait and watch ids in the client's
// own space, as on a direct connection.
//
// If the relay cannot be opened, the requests queued on it are answered
// NO_MASTER (retryable) and the next forwarded request dials again. Once it
// has carried requests, the master may hold waits and watches registered
// through it, which it forgets when the relay breaks; so a broken relay
// closes its client connection too, and the client re-sends its blocked
// acquires and watches as after any lost connection.
//
// The connection is a session (package session) like a client's: dial,
// Hello, heartbeats (the master closes a connection idle for IdleTimeout,
// and a relay that only carries a blocked acquire's wait must stay open),
// the batching writer and the reader. Its goroutines (run, which serves
// the session, and the session's reader) are the node's background work:
// Shutdown ends them (ctx derives from the node's life) and waits for
// them.
type relay struct {
	c      *conn
	node   uint32
	addr   string
	hello  wire.Hello    // the client's, as the relay says it to the master
	done   chan struct{} // closed when the relay has failed or closed
	ctx    context.Context
	cancel context.CancelFunc // called by fail

	mu     sync.Mutex
	out    []byte        // frames forwarded before the session opened
	queued []uint64      // their request ids
	sc     *session.Conn // set once the Hello succeeded
	err    error         // why the relay ended; nil while it works
}

// forward hands a routed request for group g, whose master is another
// node, to the relay for that master, opening it if needed. raw is the
// request's whole frame. It runs on the connection's event loop and never
// blocks.
func (c *conn) forward(g group.ID, raw []byte, reqID uint64) {
	s := c.s
	gv := s.view.Load().Groups[g]
	r := c.relayTo(gv.Master, s.relayAddr(gv.Master))
	r.mu.Lock()
	var err error
	switch {
	case r.err != nil:
		err = session.ErrClosed
	case r.sc != nil:
		err = r.sc.AppendRaw(raw)
	case len(r.out)+len(raw) > maxRelayQueue:
		err = session.ErrQueueFull
	default:
		r.out = append(r.out, raw...)
		r.queued = append(r.queued, reqID)
	}
	r.mu.Unlock()
	switch {
	case errors.Is(err, session.ErrQueueFull):
		s.stats.overloaded.Add(1)
		c.Respond(reqID, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: 10, Msg: "relay to the master is backed up"})
	case err != nil:
		c.Respond(reqID, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50, Msg: "relay to the master failed"})
	default:
		s.stats.forwarded.Add(1)
	}
}

// relayTo returns the connection's relay to node, whose client address is
// addr, opening one if there is none or it failed. A node shutting down
// opens none: the relay returned has failed.
func (c *conn) relayTo(node uint32, addr string) *relay {
	c.relayMu.Lock()
	defer c.relayMu.Unlock()
	r := c.relays[node]
	if r != nil && !r.failed() {
		return r
	}
	id := c.id() // read here, on the event loop that owns it
	r = &relay{c: c, node: node, addr: addr, done: make(chan struct{}), hello: wire.Hello{
		Namespace: id.Namespace, ClientID: id.ClientID, ClientKey: id.ClientKey, Agent: "paxlockd-relay", Via: c.s.cfg.NodeID,
	}}
	r.ctx, r.cancel = context.WithCancel(c.s.life)
	if c.relays == nil {
		c.relays = make(map[uint32]*relay)
	}
	c.relays[node] = r
	if !c.s.goBackground(r.run) {
		r.fail(errShuttingDown)
	}
	return r
}

// closeRelays ends the connection's relays; it runs when the client
// connection closes.
func (c *conn) closeRelays() {
	c.relayMu.Lock()
	rs := c.relays
	c.relays = nil
	c.relayMu.Unlock()
	for _, r := range rs {
		r.fail(errRelayClosed)
	}
}

func (r *relay) failed() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// run dials the master, says Hello, sends what was forwarded meanwhile,
// and serves the session until the relay ends.
func (r *relay) run() {
	c := r.c
	var dial func(ctx context.Context, addr string) (net.Conn, error)
	var hs session.Handshake
	if p := c.s.sec.peer; p != nil {
		d := &tls.Dialer{Config: p.ClientConfig(r.node)}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
		hs = session.RelayHello(r.hello)
	} else {
		h := r.hello
		hs = session.SCRAM(wire.ScramClientFirst{Namespace: h.Namespace, ClientID: h.ClientID, ClientKey: h.ClientKey, Agent: h.Agent, Via: h.Via},
			c.s.sec.relaySecret)
	}
	sc, _, err := session.Dial(r.ctx, r.addr, session.Config{
		Dial:              dial,
		DialTimeout:       relayDialTimeout,
		Handshake:         hs,
		HandshakeTimeout:  relayDialTimeout,
		MaxFrame:          c.s.cfg.MaxFrame,
		HeartbeatInterval: time.Duration(c.s.cfg.IdleTimeout) / 3,
		MaxQueued:         maxRelayQueue,
	})
	if err != nil {
		if r.ctx.Err() == nil {
			c.s.log.Warn("relay to master failed", "node", r.node, "addr", r.addr, "err", err)
		}
		r.fail(err)
		return
	}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		sc.Close(r.err)
		return
	}
	// Queued before r.sc is set, so that they go first.
	_ = sc.AppendRaw(r.out)
	r.sc, r.out, r.queued = sc, nil, nil
	r.mu.Unlock()
	c.s.stats.relays.Add(1)
	stop := context.AfterFunc(r.ctx, func() { r.fail(errShuttingDown) })
	defer stop()
	_ = sc.Run(r)
}

// Frame implements session.Handler: replies and pushes from the master go
// to the client connection byte for byte (the master's view pushes stay
// here: the client has this node's).
func (r *relay) Frame(f wire.Frame, raw []byte) {
	switch {
	case f.Type.IsPush() && f.Type != wire.TypeViewChanged:
		r.c.sendRaw(raw)
	case f.Type.IsReply() && f.ReqID != 0 && f.ReqID != session.HeartbeatID:
		r.c.inflight.Add(-1)
		r.c.sendRaw(raw)
	}
}

// Heartbeat implements session.Handler; the relay needs nothing from the
// reply.
func (r *relay) Heartbeat(*wire.Response) {}

// Closed implements session.Handler.
func (r *relay) Closed(cause error) { r.fail(cause) }

// fail ends the relay once: requests still queued for a relay that never
// opened are answered NO_MASTER; a relay that carried requests closes its
// client connection (see relay).
func (r *relay) fail(err error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.err = err
	queued, sc := r.queued, r.sc
	r.queued, r.out = nil, nil
	r.mu.Unlock()
	r.cancel()
	close(r.done)
	if sc != nil {
		sc.Close(err)
	}
	c := r.c
	for _, id := range queued {
		c.Respond(id, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50,
			Msg: fmt.Sprintf("node %d cannot reach the master (node %d)", c.s.cfg.NodeID, r.node)})
	}
	if sc != nil && !errors.Is(err, errRelayClosed) && !errors.Is(err, errShuttingDown) {
		c.s.log.Info("relay to master broke; closing its client connection", "node", r.node, "err", err)
		c.closeConn()
	}
}

// relayAddr is where this node relays requests for node id, the master
// of their group: its TLS client listener when the peers use TLS (the
// relay proves there with this node's certificate that it is this node),
// its plain one when the peers run without TLS and the cluster has a
// relay secret (the relay proves it with SCRAM); "" if it has none, or
// without either proof (no relays at all).
func (s *Server) relayAddr(id uint32) string {
	a := s.addr(paxos.NodeID(id))
	switch {
	case s.sec.peer != nil:
		return a.ClientTLS
	case s.sec.relaySecret != "":
		return a.Client
	}
	return "" // nothing to prove a relay with: no relays
}
