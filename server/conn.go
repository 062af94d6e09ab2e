package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// frameConn is a client connection's engine: it reads the client's
// frames into conn.handleFrame, one at a time (gnet's event loop, or the
// connection's reader goroutine), and sends the frames conn queues in
// conn.out, a burst per write, double-buffered (conn.flight) so that a
// burst accumulates while the previous one is on its way. gnetConn is the
// gnet listener's engine, goConn the goroutine listeners' (TLS and
// netpoll).
type frameConn interface {
	// remote is the client's address, for logs.
	remote() string
	// flushLocked starts sending conn.out unless a write under way will;
	// it is called with conn.mu held and releases it.
	flushLocked()
	// closeAfterFlush closes the connection once the frames already
	// queued have been sent (or the write failed).
	closeAfterFlush()
	// close closes the connection; the engine then runs conn.onClosed,
	// once, on the goroutine that served it. Safe from any goroutine.
	close()
}

// conn is one client connection, whichever its engine (frameConn). It is
// the group.Sink for its requests: replies and pushes are encoded into
// out, which the engine sends.
type conn struct {
	s  *Server
	fc frameConn // the connection's engine; set before the connection is shared
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
	// queued is what the engine holds for the socket: gnet's
	// OutboundBuffered as the event loop last saw it, or the goroutine
	// writer's write under way; with len(out) it is the output the client
	// has not read, bounded by Config.MaxOutput.
	queued atomic.Int64
	slow   atomic.Bool // closed as a slow consumer
	// charged is the node's output budget's charge for this connection
	// (outbudget.go), written under mu; released is set once it is
	// returned, after which nothing is charged.
	charged atomic.Int64

	mu     sync.Mutex
	enc    wire.Codec
	resp   wire.Response // scratch for Respond and reply, under mu: no allocation per reply
	out    []byte
	flight []byte // the burst the engine writes or wrote last
	// flightLen is the burst an engine took out of out that queued does
	// not count yet: one handed to gnet's AsyncWrite and not yet written
	// (gnetConn; always 0 for goConn).
	flightLen int
	released  bool
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
// already queued have been sent.
func (c *conn) closeAfterFlush() { c.fc.closeAfterFlush() }

// remote is the client's address, for logs.
func (c *conn) remote() string { return c.fc.remote() }

// closeConn closes the connection; the goroutine serving it then runs
// onClosed. Safe from any goroutine.
func (c *conn) closeConn() { c.fc.close() }
