package server

import (
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/paxlock/paxlock/client/wire"
)

// handler is the gnet event handler for client connections.
type handler struct {
	gnet.BuiltinEventEngine
	s *Server
}

// OnTick sweeps the connections of every listener (sweepConns), once a
// second.
func (h *handler) OnTick() (time.Duration, gnet.Action) {
	h.s.sweepConns()
	return time.Second, gnet.None
}

// OnOpen admits a connection gnet serves (max_conns) and makes its conn.
func (h *handler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := h.s
	if s.nconns.Add(1) > int64(s.cfg.MaxConns) {
		s.nconns.Add(-1)
		s.stats.overloaded.Add(1)
		return nil, gnet.Close
	}
	c := &conn{s: s, opened: time.Now().UnixNano()}
	c.fc = &gnetConn{c: c, gc: gc}
	c.lastSeen.Store(c.opened)
	gc.SetContext(c)
	s.conns.Store(c, struct{}{})
	return nil, gnet.None
}

// OnClose forgets a connection that closed (conn.onClosed).
func (h *handler) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None
	}
	c.onClosed()
	return gnet.None
}

// OnTraffic serves the frames a connection's client sent, each in turn.
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

// gnetConn is the engine of a connection of the gnet listener: gnet's
// event loop reads its frames (handler.OnTraffic) and writes its bursts,
// each handed to AsyncWrite.
type gnetConn struct {
	c  *conn
	gc gnet.Conn
	// writing: a burst is with AsyncWrite, whose callback (written)
	// sends what accumulates meanwhile (under c.mu).
	writing bool
}

func (g *gnetConn) remote() string { return g.gc.RemoteAddr().String() }

func (g *gnetConn) close() { _ = g.gc.Close() }

// closeAfterFlush closes the connection: gnet's Close sends what is
// queued first.
func (g *gnetConn) closeAfterFlush() { _ = g.gc.Close() }

// flushLocked starts writing c.out unless a write is under way (whose
// callback sends it); it is called with c.mu held and releases it.
func (g *gnetConn) flushLocked() {
	c := g.c
	if g.writing {
		c.mu.Unlock()
		return
	}
	g.writing = true
	c.flight, c.out = c.out, c.flight[:0]
	buf := c.flight
	c.flightLen = len(buf)
	c.mu.Unlock()
	if err := g.gc.AsyncWrite(buf, g.written); err != nil {
		c.mu.Lock()
		g.writing = false
		c.flightLen = 0
		c.accountLocked()
		c.mu.Unlock()
	}
}

// written runs on the event loop after a burst went out; it sends what
// accumulated meanwhile, writing directly since it is on the loop (gnet
// buffers what the socket does not take).
func (g *gnetConn) written(gc gnet.Conn, err error) error {
	c := g.c
	for {
		c.mu.Lock()
		// The burst is written: what the socket did not take stays in
		// gnet's buffer.
		c.flightLen = 0
		c.queued.Store(int64(gc.OutboundBuffered()))
		c.accountLocked()
		if err != nil || len(c.out) == 0 {
			g.writing = false
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
