package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/paxlock/paxlock/internal/rawio"
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
			// Raw reads and writes (package rawio); gnet's listener takes
			// the descriptor itself and is left alone.
			return s.goBackground(func() { s.serveGoConn(rawio.Wrap(nc), tlsPort) })
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
