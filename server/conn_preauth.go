package server

import "time"

// authenticated reports whether the connection proved who it is: a
// handshake accepted (SCRAM, a certificate naming a namespace, or a
// relayed Hello), or a TLS client certificate verified as a node of this
// cluster (a relaying node). Until then the pre-authentication bounds
// apply: preauth_max_frame, preauth_max_output and auth_timeout.
func (c *conn) authenticated() bool {
	return c.peerNode != 0 || c.auth.Load() != nil
}

// frameLimit is the largest client frame the connection may send now.
func (c *conn) frameLimit() int {
	if c.authenticated() {
		return c.s.cfg.MaxFrame
	}
	return c.s.cfg.PreAuthMaxFrame
}

// outputLimit is the most unread output the connection may have queued
// now.
func (c *conn) outputLimit() int64 {
	if c.authenticated() {
		return int64(c.s.cfg.MaxOutput)
	}
	return int64(c.s.cfg.PreAuthMaxOutput)
}

// authExpired closes c if it is still unauthenticated auth_timeout after
// it was accepted, heartbeats or not: an unauthenticated connection must
// not hold one of the max_conns slots forever. Called by sweepConns.
func (c *conn) authExpired(now int64) bool {
	if c.authenticated() || now-c.opened < int64(time.Duration(c.s.cfg.AuthTimeout)) {
		return false
	}
	if c.closed.Load() {
		return false
	}
	c.s.stats.authTimeouts.Add(1)
	c.s.log.Info("closing client connection: not authenticated in time",
		"remote", c.remote(), "auth_timeout", time.Duration(c.s.cfg.AuthTimeout))
	c.closeConn()
	return true
}
