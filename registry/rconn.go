// This file is one client connection to the standalone registry: its
// handshake, its reads and writes, and the views it is served and
// subscribed to.

package registry

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// rconn is one client connection. Its reader goroutine decodes requests
// and queues replies; its writer goroutine flushes the queue. Cluster
// updates queue pushes from the follower goroutines. Lock order: a
// cluster's mu before an rconn's mu.
type rconn struct {
	s       *Standalone
	nc      net.Conn
	codec   *wire.Codec // reader goroutine only
	scratch []byte      // reader goroutine only: the frame being encoded

	sess session.Accepted // reader goroutine only

	mu sync.Mutex
	// ns and v are the accepted handshake's namespace and the verifier
	// it proved ("" before one): the tables decide from them which
	// cluster's view the connection is served, and a change of the
	// namespace's verifier ends the connection.
	ns     string
	v      scramauth.Verifier
	out    []byte
	sub    *clusterState
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

// kill marks the connection closed; the writer goroutine tears it down.
// It never blocks, so it may run under a cluster's lock.
func (c *rconn) kill() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
}

// enqueueLocked appends a frame for the writer; c.mu is held.
func (c *rconn) enqueueLocked(frame []byte) {
	if c.closed {
		return
	}
	if len(c.out)+len(frame) > maxPending {
		c.s.log.Warn("registry: client not reading, disconnecting", "remote", c.nc.RemoteAddr().String())
		c.closed = true
		close(c.done)
		return
	}
	c.out = append(c.out, frame...)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// send encodes one frame into the queue.
func (c *rconn) send(typ wire.Type, reqID uint64, m wire.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sendLocked(typ, reqID, m)
}

func (c *rconn) sendLocked(typ wire.Type, reqID uint64, m wire.Message) {
	if c.closed {
		return
	}
	frame, err := c.codec.AppendFrame(c.scratch[:0], typ, reqID, m)
	if err != nil {
		c.s.log.Error("registry: encoding a reply", "type", typ, "err", err)
		return
	}
	c.scratch = frame
	c.enqueueLocked(frame)
}

// Reply implements session.Endpoint.
func (c *rconn) Reply(reqID uint64, r wire.Response) { c.send(wire.TypeResponse, reqID, &r) }

func (c *rconn) writeLoop() {
	defer c.s.wg.Done()
	var buf []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			c.teardown()
			return
		}
		c.mu.Lock()
		buf, c.out = c.out, buf[:0]
		c.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := c.nc.Write(buf); err != nil {
			c.kill()
		}
	}
}

// teardown closes the socket (ending the reader) and forgets the
// connection everywhere.
func (c *rconn) teardown() {
	c.nc.Close()
	c.mu.Lock()
	sub := c.sub
	c.sub = nil
	c.mu.Unlock()
	if sub != nil {
		sub.mu.Lock()
		delete(sub.subs, c)
		sub.mu.Unlock()
	}
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
}

func (c *rconn) readLoop() {
	defer c.s.wg.Done()
	defer c.kill()
	br := bufio.NewReaderSize(c.nc, 16<<10)
	var buf []byte
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout))
		f, nb, err := wire.ReadFrame(br, buf, c.s.cfg.MaxFrame)
		buf = nb
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) || errors.Is(err, wire.ErrBadLength) || errors.Is(err, wire.ErrBadVersion) {
				c.s.log.Info("registry: closing connection that broke framing", "remote", c.nc.RemoteAddr().String(), "err", err)
			}
			return
		}
		c.handle(f)
	}
}

// registryMsg is the BAD_REQUEST message for lock requests.
const registryMsg = "this is a paxlock registry: it serves the handshake, Heartbeat, GetView and SubscribeView only; send lock requests to the group's master named in the view"

// decode decodes a request's body.
func (c *rconn) decode(f wire.Frame) (wire.Message, error) { return c.codec.Decode(f.Type, f.Body) }

// handle answers one frame: the session's own requests, and BAD_REQUEST
// for any other.
func (c *rconn) handle(f wire.Frame) {
	m, ok := session.DecodeRequest(f, c.decode, c)
	if !ok {
		return
	}
	if !c.sess.Handle(f.ReqID, m, c) {
		c.Reply(f.ReqID, wire.Response{Status: wire.StatusBadRequest, Msg: registryMsg})
	}
}

// Credentials implements session.Endpoint: the registry authenticates a
// client of any namespace it maps to a cluster, against the verifier of
// the namespace's configured secret.
func (c *rconn) Credentials(ns string) (scramauth.Verifier, bool) {
	c.s.tmu.RLock()
	defer c.s.tmu.RUnlock()
	e, ok := c.s.nsMap[ns]
	return e.v, ok
}

// TrustRelay implements session.Endpoint: nodes relay to nodes, never to a
// registry.
func (c *rconn) TrustRelay(*wire.Hello) error {
	return errors.New("this is a paxlock registry: it takes no relays")
}

// RelayCredentials implements session.Endpoint: a registry takes no relays.
func (c *rconn) RelayCredentials(uint32, string) (scramauth.Verifier, bool) {
	return scramauth.Verifier{}, false
}

// Send implements session.Endpoint.
func (c *rconn) Send(typ wire.Type, reqID uint64, m wire.Message) { c.send(typ, reqID, m) }

// Refused implements session.Endpoint: a refused handshake is logged at Debug
// (the registry answers views, which are public, and keeps no metrics).
func (c *rconn) Refused(ns string, err error) {
	c.s.log.Debug("registry: handshake refused", "namespace", ns, "remote", c.nc.RemoteAddr().String(), "why", err)
}

// Accepted implements session.Endpoint: the connection is now served the view
// of the namespace's cluster, and drops a subscription made for another
// namespace.
func (c *rconn) Accepted(_, cur session.Identity) {
	c.mu.Lock()
	changed := c.ns != cur.Namespace
	c.ns, c.v = cur.Namespace, cur.Verifier
	c.mu.Unlock()
	if changed {
		c.unsubscribe()
	}
}

// entry returns the tables' entry of the connection's namespace; false
// before a handshake or when the namespace left the tables.
func (c *rconn) entry() (nsEntry, bool) {
	c.mu.Lock()
	ns := c.ns
	c.mu.Unlock()
	if ns == "" {
		return nsEntry{}, false
	}
	c.s.tmu.RLock()
	defer c.s.tmu.RUnlock()
	e, ok := c.s.nsMap[ns]
	return e, ok
}

// ViewVersion implements session.Endpoint: the version of the view the
// connection is served (its cluster's cached view's, stamped with the
// namespace's epoch; 0 before a Hello or a view).
func (c *rconn) ViewVersion() uint64 {
	e, ok := c.entry()
	if !ok {
		return 0
	}
	return wire.RegistryViewVersion(e.epoch, e.cl.version())
}

// noViewRetryMs is the RetryAfterMs of the NO_MASTER answer given while a
// cluster's view is not known yet.
const noViewRetryMs = 500

// ServeView implements session.Endpoint: it answers GetView or SubscribeView
// with the view of the cluster the Hello's namespace is assigned to, so
// it needs a Hello whatever the session allows. A subscription is
// recorded and its reply queued under the cluster's lock, so that every
// later view of the cluster follows the reply as a push and none is
// missed; the tables' lock is held throughout, so an assignment change
// (applyTables) either sees the subscription and moves it or comes after
// and is served here.
func (c *rconn) ServeView(reqID uint64, subscribe bool) {
	c.mu.Lock()
	ns := c.ns
	c.mu.Unlock()
	if ns == "" {
		c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "authenticate first"})
		return
	}
	c.s.tmu.RLock()
	defer c.s.tmu.RUnlock()
	e, ok := c.s.nsMap[ns]
	if !ok {
		c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "the namespace left the registry"})
		return
	}
	if subscribe {
		c.unsubscribe()
	}
	cl := e.cl
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.view == nil {
		c.send(wire.TypeResponse, reqID, &wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: noViewRetryMs,
			Msg: "the registry has no view of cluster " + cl.name + " yet"})
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if subscribe && !c.closed {
		c.sub = cl
		cl.subs[c] = e.epoch
	}
	c.sendLocked(wire.TypeView, reqID, stamped(cl.view, e.epoch))
}

// unsubscribe drops the connection's subscription, if any.
func (c *rconn) unsubscribe() {
	c.mu.Lock()
	sub := c.sub
	c.sub = nil
	c.mu.Unlock()
	if sub != nil {
		sub.mu.Lock()
		delete(sub.subs, c)
		sub.mu.Unlock()
	}
}

// ---- clusters ----
