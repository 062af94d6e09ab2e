package server

import "github.com/paxlock/paxlock/client/wire"

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
// session.Endpoint.
func (c *conn) Reply(reqID uint64, r wire.Response) { c.sendResponse(reqID, r) }

// ViewVersion implements session.Endpoint.
func (c *conn) ViewVersion() uint64 { return c.s.view.Load().Version }

// view is the view this connection is served: a TLS connection's names
// the nodes' TLS client addresses.
func (c *conn) view() *wire.View {
	if c.tlsPort {
		return c.s.tlsView.Load()
	}
	return c.s.view.Load()
}

// ServeView implements session.Endpoint: the node's view, and its changes as
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

// flushLocked has the engine send c.out (frameConn.flushLocked); it is
// called with c.mu held and releases it.
func (c *conn) flushLocked() { c.fc.flushLocked() }
