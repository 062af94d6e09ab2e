package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
)

// goConn is the engine of a connection of a goroutine listener (TLS or
// netpoll): its reader goroutine (serveGoConn) reads its frames, its
// writer goroutine (writeLoop) writes its bursts.
type goConn struct {
	c  *conn
	nc net.Conn // a *tls.Conn on the TLS port unless Config.clientTLSOff

	wake    chan struct{} // cap 1: conn.out has frames to send
	done    chan struct{} // closed by close
	once    sync.Once
	closing atomic.Bool // closeAfterFlush: close once conn.out is sent
}

// closeAfterFlush closes the connection once what is queued has been
// written (or the write failed).
func (t *goConn) closeAfterFlush() {
	t.closing.Store(true)
	t.kick()
}

func (t *goConn) remote() string { return t.nc.RemoteAddr().String() }

// flushLocked wakes the writer; it is called with c.mu held and
// releases it.
func (t *goConn) flushLocked() {
	t.c.mu.Unlock()
	t.kick()
}

// kick wakes the writer.
func (t *goConn) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// close closes the connection; its reader then ends and runs onClosed.
func (t *goConn) close() {
	t.once.Do(func() {
		close(t.done)
		_ = t.nc.Close()
	})
}

// serveGoConn serves one connection of a goroutine listener (the TLS one
// if tlsPort): the max_conns check, the handshake if TLS, then its frames
// until it closes.
func (s *Server) serveGoConn(nc net.Conn, tlsPort bool) {
	if !s.admitConn(nc) {
		return
	}
	var tc *tls.Conn
	if tlsPort && !s.cfg.clientTLSOff {
		if tc = s.tlsHandshake(nc); tc == nil {
			s.nconns.Add(-1)
			return
		}
		nc = tc
	}
	c := &conn{s: s, tlsPort: tlsPort}
	t := &goConn{c: c, nc: nc, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.fc = t
	if cs := tlsState(tc); len(cs.VerifiedChains) > 0 {
		// Verified by the handshake against the cluster CA or client_ca;
		// a node's certificate names it (relays: see TrustRelay), and
		// only the cluster CA may vouch for a node.
		leaf := cs.PeerCertificates[0]
		if id, err := pki.CheckNode(leaf, s.cfg.ClusterName, 0); err == nil && s.verifiesAsNode(cs) {
			c.peerNode = id
		}
		c.certNamespaces = pki.ClientNamespaces(leaf)
	}
	if lc, ok := nc.(*localConn); ok {
		c.certNamespaces = lc.namespaces // vouched for by ServeLocal's caller
	}
	c.opened = time.Now().UnixNano()
	c.lastSeen.Store(c.opened)
	s.conns.Store(c, struct{}{})
	stop := context.AfterFunc(s.life, t.close)
	defer stop()
	wrote := make(chan struct{})
	go func() { // ended by t.close, which the reader calls on its way out
		defer close(wrote)
		t.writeLoop()
	}()
	br := bufio.NewReaderSize(nc, 32<<10)
	var buf []byte
	for {
		f, nb, err := wire.ReadFrame(br, buf, c.frameLimit())
		buf = nb
		if err != nil {
			var ferr error
			if errors.Is(err, wire.ErrFrameTooLarge) || errors.Is(err, wire.ErrBadVersion) || errors.Is(err, wire.ErrBadLength) {
				ferr = err
			}
			if ferr != nil {
				s.stats.badFrames.Add(1)
				s.log.Warn("closing client connection: bad frame", "remote", c.remote(), "err", ferr)
			}
			break
		}
		c.lastSeen.Store(time.Now().UnixNano())
		c.handleFrame(f, buf)
	}
	t.close()
	<-wrote
	c.onClosed()
}

// writeLoop is the connection's writer: it sends what is queued in c.out
// whenever woken, until the connection closes. c.queued is what a write
// under way holds, so that the output bound (overLocked) counts it.
func (t *goConn) writeLoop() {
	c := t.c
	for {
		select {
		case <-t.done:
			return
		case <-t.wake:
		}
		c.mu.Lock()
		if len(c.out) == 0 {
			c.mu.Unlock()
			if t.closing.Load() {
				t.close()
				return
			}
			continue
		}
		c.flight, c.out = c.out, c.flight[:0]
		buf := c.flight
		c.queued.Store(int64(len(buf)))
		c.mu.Unlock()
		_ = t.nc.SetWriteDeadline(time.Now().Add(time.Duration(c.s.cfg.IdleTimeout)))
		if _, err := t.nc.Write(buf); err != nil {
			t.close()
			return
		}
		c.mu.Lock()
		c.queued.Store(0)
		c.accountLocked()
		if cap(buf) > 1<<20 {
			c.flight = nil // do not keep a burst's buffer forever
		}
		c.mu.Unlock()
		t.kick() // look again: more may have been queued, or closing set
	}
}
