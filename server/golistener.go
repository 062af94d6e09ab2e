package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/wire"
)

// The goroutine client listeners: the TLS one (client_tls_addr) and, with
// client_listener = "netpoll", the plain client port. They serve the same
// protocol as the gnet listener, through the same conn and handleFrame,
// on Go's netpoller (gnet has no TLS). Each connection has a reader
// goroutine, which plays the part of gnet's event loop for it (it decodes
// and handles the frames one after another, and owns the session state),
// and a writer goroutine, which sends what the replies and pushes queued
// in conn.out, all of it in one write, as the gnet path's AsyncWrite does.
// Both are the node's background work (goBackground): Shutdown closes the
// listener and the connections and waits for them.

// tlsConn is the transport of a goroutine listener's conn (TLS or
// netpoll).
type tlsConn struct {
	nc net.Conn // a *tls.Conn on the TLS port unless Config.clientTLSOff

	wake    chan struct{} // cap 1: conn.out has frames to send
	done    chan struct{} // closed by close
	once    sync.Once
	closing atomic.Bool // closeAfterFlush: close once conn.out is sent
}

// closeAfterFlush closes the connection once what is queued has been
// written (or the write failed).
func (t *tlsConn) closeAfterFlush() {
	t.closing.Store(true)
	t.kick()
}

func (t *tlsConn) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *tlsConn) close() {
	t.once.Do(func() {
		close(t.done)
		_ = t.nc.Close()
	})
}

// startGoListener opens a goroutine client listener at addr, the TLS one
// if tlsPort, and serves it in the background until Shutdown; it returns
// the address it listens on. Its accept loop outlives failed accepts
// (acceptLoop).
func (s *Server) startGoListener(addr string, tlsPort bool) (string, error) {
	name := "client"
	if tlsPort {
		name = "client tls"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("server: %s listener: %w", name, err)
	}
	bound := ln.Addr().String()
	if s.cfg.wrapClientListener != nil {
		ln = s.cfg.wrapClientListener(ln)
	}
	h := s.listeners.add(name)
	stop := context.AfterFunc(s.life, func() { _ = ln.Close() })
	if !s.goBackground(func() {
		defer stop()
		s.acceptLoop(ln, h, func(nc net.Conn) bool {
			return s.goBackground(func() { s.serveTLS(nc, tlsPort) })
		})
	}) {
		stop()
		_ = ln.Close()
		return "", errors.New("server: start: shut down")
	}
	return bound, nil
}

// admitConn counts a new client connection against max_conns; past it
// the connection is closed (OVERLOADED in the metric) and admitConn
// reports false. On the TLS port it runs before the handshake, which
// costs the node a descriptor, CPU and memory.
func (s *Server) admitConn(nc net.Conn) bool {
	if s.nconns.Add(1) > int64(s.cfg.MaxConns) {
		s.nconns.Add(-1)
		s.stats.overloaded.Add(1)
		_ = nc.Close()
		return false
	}
	return true
}

// tlsHandshake runs the TLS server handshake on nc within
// tlsHandshakeTimeout, in one of the node's bounded handshake slots
// (max_tls_handshakes); it returns nil, nc closed, if none was free or
// the handshake failed.
func (s *Server) tlsHandshake(nc net.Conn) *tls.Conn {
	if !s.tlsSlots.acquire() {
		s.log.Debug("client tls handshake refused: max_tls_handshakes under way", "remote", nc.RemoteAddr().String())
		_ = nc.Close()
		return nil
	}
	defer s.tlsSlots.release()
	tc := tls.Server(nc, s.clientTLSConfig())
	ctx, cancel := context.WithTimeout(s.life, tlsHandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		s.log.Debug("client tls handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		_ = nc.Close()
		return nil
	}
	return tc
}

// serveTLS serves one connection of a goroutine listener (the TLS one if
// tlsPort): the max_conns check, the handshake if TLS, then its frames
// until it closes.
func (s *Server) serveTLS(nc net.Conn, tlsPort bool) {
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
	t := &tlsConn{nc: nc, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c := &conn{s: s, tc: t, tlsPort: tlsPort}
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
	c.opened = time.Now().UnixNano()
	c.lastSeen.Store(c.opened)
	s.conns.Store(c, struct{}{})
	stop := context.AfterFunc(s.life, t.close)
	defer stop()
	wrote := make(chan struct{})
	go func() { // ended by t.close, which the reader calls on its way out
		defer close(wrote)
		c.writeTLS()
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

// writeTLS is a TLS connection's writer: it sends what is queued in
// c.out whenever woken, until the connection closes. c.queued is what a
// write under way holds, so that the output bound (overLocked) counts it.
func (c *conn) writeTLS() {
	t := c.tc
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
