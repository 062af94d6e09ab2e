package server

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/paxlock/paxlock/session"
	"github.com/paxlock/paxlock/wire"
)

// handler is the gnet event handler for client connections.
type handler struct {
	gnet.BuiltinEventEngine
	s *Server
}

// conn is one client connection. It is the group.Sink for its requests:
// replies and pushes are encoded into a buffer and written with one
// AsyncWrite per burst, double-buffered so that a burst accumulates while
// the previous one is on its way.
type conn struct {
	s  *Server
	gc gnet.Conn // the gnet listener's connection; nil for a goroutine listener's
	tc *tlsConn  // a goroutine listener's connection (TLS or netpoll); nil for a gnet one
	// tlsPort: the connection came in on client_tls_addr (it is served
	// the view naming the nodes' TLS client addresses).
	tlsPort bool
	// peerNode is the node id the connection's verified TLS client
	// certificate names (a relaying node of this cluster), 0 if none.
	peerNode uint32
	// certNamespaces are the namespaces the connection's verified TLS
	// client certificate names (pki.ClientNamespaces), nil if none.
	certNamespaces []string
	// certRefused is the namespace the last Credentials refused for want
	// of a certificate naming it (client_tls bind_namespace), "" if none
	// (event loop only; Refused reports it).
	certRefused string

	// owned by the event loop
	sess session.Accepted // handshake state; its ClientKey is for relays' Hello (never logged)
	dec  wire.Codec
	// Reused bodies of the hot request types, decoded into on the event
	// loop: handleFrame copies what it needs out of them before the next
	// frame.
	acq wire.Acquire
	rel wire.Release
	ren wire.Renew
	st  wire.State

	relayMu sync.Mutex
	relays  map[uint32]*relay // by master node; see relay

	// Revocation (see checkRevoked): helloGen is the namespace table's
	// generation read before the last Hello was checked (event loop
	// only); auth is what the accepted Hello proved, readable off the
	// loop; revoked is set once the session lost its authentication.
	helloGen uint64
	auth     atomic.Pointer[authState]
	revoked  atomic.Bool

	inflight atomic.Int64
	lastSeen atomic.Int64 // unix nanos of the last frame
	opened   int64        // unix nanos of the accept (auth_timeout); set before the connection is shared
	closed   atomic.Bool
	// queued is what gnet holds for the socket (OutboundBuffered), as the
	// event loop last saw it; with len(out) it is the output the client
	// has not read, bounded by Config.MaxOutput.
	queued atomic.Int64
	slow   atomic.Bool // closed as a slow consumer
	// charged is the node's output budget's charge for this connection
	// (outbudget.go), written under mu; released is set once it is
	// returned, after which nothing is charged.
	charged atomic.Int64

	mu      sync.Mutex
	enc     wire.Codec
	resp    wire.Response // scratch for Respond and reply, under mu: no allocation per reply
	out     []byte
	flight  []byte
	writing bool
	// flightLen is the burst handed to gnet's AsyncWrite and not yet
	// written (gnet only).
	flightLen int
	released  bool
}

func (h *handler) OnTick() (time.Duration, gnet.Action) {
	h.s.sweepConns()
	return time.Second, gnet.None
}

// sweepConns runs every second (gnet's tick, or sweepLoop without gnet):
// it closes revoked sessions and idle connections, of every listener.
func (s *Server) sweepConns() {
	s.checkRevoked()
	idle := time.Duration(s.cfg.IdleTimeout)
	now := time.Now().UnixNano()
	s.conns.Range(func(k, _ any) bool {
		c := k.(*conn)
		if c.authExpired(now) {
			return true
		}
		if now-c.lastSeen.Load() > int64(idle) {
			s.log.Info("closing idle client connection", "remote", c.remote())
			c.closeConn()
		}
		return true
	})
}

// sweepLoop calls sweepConns every second until the node's life ends
// (the netpoll listener's stand-in for gnet's tick).
func (s *Server) sweepLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
			s.sweepConns()
		}
	}
}

func (h *handler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := h.s
	if s.nconns.Add(1) > int64(s.cfg.MaxConns) {
		s.nconns.Add(-1)
		s.stats.overloaded.Add(1)
		return nil, gnet.Close
	}
	c := &conn{s: s, gc: gc, opened: time.Now().UnixNano()}
	c.lastSeen.Store(c.opened)
	gc.SetContext(c)
	s.conns.Store(c, struct{}{})
	return nil, gnet.None
}

func (h *handler) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None
	}
	c.onClosed()
	return gnet.None
}

// onClosed forgets a connection that closed: its view subscription, its
// relays, its client's waits and watches. It runs once, on the goroutine
// that served the connection.
func (c *conn) onClosed() {
	s := c.s
	c.closed.Store(true)
	s.nconns.Add(-1)
	s.conns.Delete(c)
	c.releaseOutput()
	s.subscribe(c, false)
	s.reg.drop(c)
	c.closeRelays()
	if c.sess.Authenticated() {
		s.svc.ForgetClient(c.sess.Identity().ClientID, c)
		s.nsConns.move(c.sess.Identity(), session.Identity{})
	}
}

// closeAfterFlush closes the connection after the replies and pushes
// already queued have been sent (gnet's Close does the same).
func (c *conn) closeAfterFlush() {
	if c.tc != nil {
		c.tc.closeAfterFlush()
		return
	}
	_ = c.gc.Close()
}

// remote is the client's address, for logs.
func (c *conn) remote() string {
	if c.tc != nil {
		return c.tc.nc.RemoteAddr().String()
	}
	return c.gc.RemoteAddr().String()
}

// closeConn closes the connection; the goroutine serving it then runs
// onClosed. Safe from any goroutine.
func (c *conn) closeConn() {
	if c.tc != nil {
		c.tc.close()
		return
	}
	_ = c.gc.Close()
}

func (h *handler) OnTraffic(gc gnet.Conn) gnet.Action {
	c := gc.Context().(*conn)
	c.lastSeen.Store(time.Now().UnixNano())
	// Refresh the output the client has not read (see written): it may
	// have drained since the last write.
	if q := int64(gc.OutboundBuffered()); q != c.queued.Load() {
		c.mu.Lock()
		c.queued.Store(q)
		c.accountLocked()
		c.mu.Unlock()
	}
	for {
		buf, _ := gc.Peek(-1)
		if len(buf) < 4 {
			return gnet.None
		}
		f, n, err := wire.ParseFrame(buf, c.frameLimit())
		if err != nil {
			// Framing is broken: nothing after this can be trusted.
			c.s.stats.badFrames.Add(1)
			c.s.log.Warn("closing client connection: bad frame", "remote", gc.RemoteAddr().String(), "err", err)
			return gnet.Close
		}
		if n == 0 {
			return gnet.None
		}
		// The frame's body aliases gnet's buffer: decode before Discard.
		c.handleFrame(f, buf[:n])
		if _, err := gc.Discard(n); err != nil {
			return gnet.Close
		}
	}
}

// Respond implements group.Sink.
func (c *conn) Respond(reqID uint64, r wire.Response) {
	c.inflight.Add(-1)
	c.sendResponse(reqID, r)
}

// Closed reports whether the connection has closed; the lock service
// then makes no new reference to it (a hold's Lost has nobody to go to).
func (c *conn) Closed() bool { return c.closed.Load() }

// Push implements group.Sink.
func (c *conn) Push(m wire.Message) {
	var typ wire.Type
	switch m.(type) {
	case *wire.Granted:
		typ = wire.TypeGranted
	case *wire.Lost:
		typ = wire.TypeLost
	case *wire.WatchEvent:
		typ = wire.TypeWatchEvent
	case *wire.View:
		typ = wire.TypeViewChanged
	default:
		return
	}
	c.send(typ, 0, m)
}

// Reply answers a request without going through a group; it implements
// session.Host.
func (c *conn) Reply(reqID uint64, r wire.Response) { c.sendResponse(reqID, r) }

// ViewVersion implements session.Host.
func (c *conn) ViewVersion() uint64 { return c.s.view.Load().Version }

// view is the view this connection is served: a TLS connection's names
// the nodes' TLS client addresses.
func (c *conn) view() *wire.View {
	if c.tlsPort {
		return c.s.tlsView.Load()
	}
	return c.s.view.Load()
}

// ServeView implements session.Host: the node's view, and its changes as
// pushes to a subscriber.
func (c *conn) ServeView(reqID uint64, subscribe bool) {
	if subscribe {
		c.s.subscribe(c, true)
	}
	c.send(wire.TypeView, reqID, c.view())
}

// sendResponse encodes r from the connection's scratch Response, so that
// r does not escape to the heap.
func (c *conn) sendResponse(reqID uint64, r wire.Response) {
	if c.closed.Load() {
		return
	}
	c.mu.Lock()
	c.resp = r
	c.appendLocked(wire.TypeResponse, reqID, &c.resp)
}

func (c *conn) send(typ wire.Type, reqID uint64, m wire.Message) {
	if c.closed.Load() {
		return
	}
	c.mu.Lock()
	c.appendLocked(typ, reqID, m)
}

// appendLocked encodes one frame into c.out and flushes; it is called with
// c.mu held and releases it.
func (c *conn) appendLocked(typ wire.Type, reqID uint64, m wire.Message) {
	out, err := c.enc.AppendFrame(c.out, typ, reqID, m)
	if err != nil {
		c.unsent(typ, reqID, err) // answered ERROR, not left unanswered
	} else {
		c.out = out
	}
	c.queuedLocked()
}

// sendRaw sends a frame encoded elsewhere (a relayed reply or push).
func (c *conn) sendRaw(frame []byte) {
	if c.closed.Load() {
		return
	}
	c.mu.Lock()
	c.out = append(c.out, frame...)
	c.queuedLocked()
}

// queuedLocked sends what was just queued in c.out, within the
// connection's output bound and the node's (max_output_total); it is
// called with c.mu held and releases it.
func (c *conn) queuedLocked() {
	if c.overLocked() {
		return
	}
	over := c.accountLocked()
	c.flushLocked()
	if over {
		c.s.enforceOutputBudget()
	}
}

// overLocked checks the output bound; it is called with c.mu held and
// releases it when it reports true (the connection is then closing).
func (c *conn) overLocked() bool {
	if int64(len(c.out))+c.queued.Load() <= c.outputLimit() {
		return false
	}
	c.out = nil
	c.mu.Unlock()
	c.slowConsumer()
	return true
}

// slowConsumer closes a connection whose client does not read what it is
// sent, once: further replies and pushes are dropped, and OnClose forgets
// its waits and watches. Safe from any goroutine.
func (c *conn) slowConsumer() {
	if !c.slow.CompareAndSwap(false, true) {
		return
	}
	c.closed.Store(true)
	c.s.stats.slowConsumers.Add(1)
	c.s.log.Warn("closing client connection: slow consumer, output not read",
		"remote", c.remote(), "limit", c.outputLimit())
	c.releaseOutput()
	c.closeConn()
}

// flushLocked starts writing c.out unless a write is under way (whose
// callback sends it); it is called with c.mu held and releases it.
func (c *conn) flushLocked() {
	if c.tc != nil {
		c.mu.Unlock()
		c.tc.kick()
		return
	}
	if c.writing {
		c.mu.Unlock()
		return
	}
	c.writing = true
	c.flight, c.out = c.out, c.flight[:0]
	buf := c.flight
	c.flightLen = len(buf)
	c.mu.Unlock()
	if err := c.gc.AsyncWrite(buf, c.written); err != nil {
		c.mu.Lock()
		c.writing = false
		c.flightLen = 0
		c.accountLocked()
		c.mu.Unlock()
	}
}

// written runs on the event loop after a burst went out; it sends what
// accumulated meanwhile, writing directly since it is on the loop (gnet
// buffers what the socket does not take).
func (c *conn) written(gc gnet.Conn, err error) error {
	for {
		c.mu.Lock()
		// The burst is written: what the socket did not take stays in
		// gnet's buffer.
		c.flightLen = 0
		c.queued.Store(int64(gc.OutboundBuffered()))
		c.accountLocked()
		if err != nil || len(c.out) == 0 {
			c.writing = false
			c.mu.Unlock()
			return nil
		}
		c.flight, c.out = c.out, c.flight[:0]
		buf := c.flight
		c.flightLen = len(buf)
		c.mu.Unlock()
		_, err = gc.Write(buf)
		if q := gc.OutboundBuffered(); int64(q) > c.outputLimit() {
			c.slowConsumer()
			err = net.ErrClosed
		}
	}
}
