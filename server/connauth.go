// This file is a connection's side of authentication (session.Endpoint): the
// namespaces' verifiers, relays' proofs, accepted handshakes, and the
// revocation of sessions whose namespace or secret changed.

package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// id is the identity of the connection's Hello.
func (c *conn) id() session.Identity { return c.sess.Identity() }

// Credentials implements session.Endpoint: the namespace's verifier from the
// replicated namespace table. With client_tls bind_namespace, a
// connection whose verified client certificate does not name ns gets
// none, as for an unknown namespace: the SCRAM exchange still runs and
// fails at the proof (AUTH_FAILED), so the certificate is a second
// factor and never stands in for the secret.
func (c *conn) Credentials(ns string) (scramauth.Verifier, bool) {
	c.helloGen = c.s.svc.NamespaceGeneration() // before the lookup: see checkRevoked
	c.certRefused = ""
	if c.s.sec.bindNamespace && !c.certNames(ns) {
		c.certRefused = ns
		return scramauth.Verifier{}, false
	}
	return c.s.credentials(ns)
}

// errCertNamespace is why a client's session was refused under
// client_tls bind_namespace (for the node's log; the client is told
// AUTH_FAILED only).
var errCertNamespace = errors.New("the connection's client certificate does not name the namespace (client_tls bind_namespace)")

// TrustRelay implements session.Endpoint. A relay's Hello names a client
// without its secret, so it is accepted only from the node it says it
// comes from: on the TLS listener, from a connection whose client
// certificate (verified against the cluster CA) names node Via of this
// cluster. Anywhere else nothing tells a node from anyone who reaches the
// client port, and it is refused: a node whose peers run without TLS
// relays with SCRAM and the relay secret instead (RelayCredentials).
func (c *conn) TrustRelay(h *wire.Hello) error {
	switch {
	case c.peerNode == 0:
		return errRelayUntrusted
	case c.peerNode != h.Via:
		return fmt.Errorf("%w: certificate of node %d, Hello from node %d", errRelayUntrusted, c.peerNode, h.Via)
	}
	c.helloGen = c.s.svc.NamespaceGeneration()
	if _, ok := c.s.credentials(h.Namespace); !ok {
		return errAuth
	}
	return nil
}

// errRelayUntrusted refuses a relay's Hello from a connection that does
// not prove it comes from the node named.
var errRelayUntrusted = errors.New("a relay's Hello needs the TLS client listener and the relaying node's certificate (without peer TLS, relays prove the relay secret with SCRAM)")

// RelayCredentials implements session.Endpoint: without peer TLS, a relay's
// SCRAM exchange (a ScramClientFirst with Via set) proves the cluster's
// relay secret, for a namespace that exists, from a node that is a
// member. Without a relay secret there is nothing to prove, and with
// peer TLS relays prove themselves with their node certificates
// (TrustRelay) only: refused.
func (c *conn) RelayCredentials(via uint32, ns string) (scramauth.Verifier, bool) {
	c.helloGen = c.s.svc.NamespaceGeneration() // before the lookup: see checkRevoked
	if c.s.sec.peer != nil || c.s.sec.relaySecret == "" || c.s.addr(paxos.NodeID(via)).ID != via {
		return scramauth.Verifier{}, false
	}
	if _, ok := c.s.credentials(ns); !ok {
		return scramauth.Verifier{}, false
	}
	return c.s.sec.relayVerifier, true
}

// Refused implements session.Endpoint: a refused handshake is counted
// (paxlock_auth_failures_total) and logged, at most once a second; the
// log says when the connection's client certificate did not name the
// namespace (see Credentials).
func (c *conn) Refused(ns string, err error) {
	if ns != "" && ns == c.certRefused {
		err = fmt.Errorf("%w: %w", errCertNamespace, err)
	}
	c.s.metrics.authFailures.Inc()
	c.s.logAuthFailure(ns, c.remote(), err)
}

// authLogEvery is the least time between two logged auth failures: a
// client retrying a wrong secret in a loop must not flood the log (the
// counter, paxlock_auth_failures_total, counts every one).
const authLogEvery = time.Second

// logAuthFailure logs a refused handshake (the namespace, the remote
// address and why; never the secret, which SCRAM never sends), at most
// once per authLogEvery, with how many were not logged since the last one.
func (s *Server) logAuthFailure(ns, remote string, why error) {
	now := time.Now().UnixNano()
	last := s.stats.authLogged.Load()
	if now-last < int64(authLogEvery) || !s.stats.authLogged.CompareAndSwap(last, now) {
		s.stats.authQuiet.Add(1)
		return
	}
	s.log.Warn("client authentication failed", "namespace", ns, "remote", remote, "why", why, "suppressed", s.stats.authQuiet.Swap(0))
}

// errAuth refuses a relay's Hello for a namespace that does not exist.
var errAuth = errors.New("unknown namespace")

// Send implements session.Endpoint.
func (c *conn) Send(typ wire.Type, reqID uint64, m wire.Message) { c.send(typ, reqID, m) }

// Accepted implements session.Endpoint: a handshake that changes the client
// id lets go of what the previous client left on this connection, and one
// that changes the namespace ends what the session held in the old one
// (see leaveNamespace), so that nothing of a namespace reaches a session
// that no longer proves its secret.
func (c *conn) Accepted(prev, cur session.Identity) {
	switch {
	case prev.ClientID == 0:
	case prev.Namespace != cur.Namespace:
		c.leaveNamespace(prev)
	case prev.ClientID != cur.ClientID:
		c.s.svc.ForgetClient(prev.ClientID, c)
	}
	c.s.nsConns.move(prev, cur)
	c.auth.Store(&authState{ns: cur.Namespace, v: cur.Verifier, relay: cur.Via != 0, client: cur.ClientID, gen: c.helloGen})
	c.s.svc.AttachClient(cur.ClientID, c)
	if c.closed.Load() {
		c.s.svc.ForgetClient(cur.ClientID, c) // closed meanwhile
	}
}

// leaveNamespace ends what the session prev left on this connection in its
// namespace when a later handshake names another one: its blocked
// acquires are answered Granted AUTH_FAILED, its holds this node tells it
// about get Lost with EventRevoked (they stay in the lock table and
// expire: the session can no longer renew them), and its watches are
// dropped, as for a revoked session (group.Service.RevokeClient). The
// workers see this before any request of the new session, which is
// submitted after it.
func (c *conn) leaveNamespace(prev session.Identity) {
	c.s.log.Info("client session changed namespace: ending its waits, watches and holds in the old one",
		"remote", c.remote(), "namespace", prev.Namespace)
	c.s.svc.RevokeClient(prev.ClientID, prev.Namespace, c, nil)
	if c.sess.Identity().ClientID != prev.ClientID {
		c.s.svc.ForgetClient(prev.ClientID, c) // its sinks entry too
	}
}

// namespaceFull answers OVERLOADED, and reports true, for a client's
// handshake (its ScramClientFirst) that would open one more session of a
// namespace that has SessionLimits.MaxConnsPerNamespace of them on this
// node already. A handshake of the namespace the session already has
// adds none. Concurrent handshakes are counted when accepted, so the
// count may pass the bound by the handshakes under way at once.
func (c *conn) namespaceFull(reqID uint64, m wire.Message) bool {
	first, ok := m.(*wire.ScramClientFirst)
	if !ok || first.Via != 0 {
		return false
	}
	if c.sess.Authenticated() && c.sess.Identity().Namespace == first.Namespace {
		return false
	}
	max := c.s.cfg.MaxConnsPerNamespace
	if !c.s.nsConns.full(first.Namespace, max) {
		return false
	}
	c.s.stats.overloaded.Add(1)
	c.Reply(reqID, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: uint32(nsConnsRetry / time.Millisecond),
		Msg: fmt.Sprintf("too many connections of this namespace on this node (%d)", max)})
	return true
}

// authState is what a connection's accepted handshake proved, and the
// generation of the namespace table it was checked against.
type authState struct {
	ns     string
	v      scramauth.Verifier // the namespace's verifier the SCRAM exchange passed
	relay  bool               // a relay's session: no verifier, its client's node checked it
	client uint64
	gen    uint64
}

// stillValid reports whether the namespace table still grants a: the
// namespace exists and, for a client's session, its verifier is still
// the one the session proved the secret against (a changed secret has a
// new verifier).
func (s *Server) stillValid(a *authState) bool {
	v, ok := s.credentials(a.ns)
	return ok && (a.relay || v.Equal(a.v))
}

// checkRevoked closes the sessions whose authentication the namespace
// table no longer grants (the namespace was removed or its secret
// changed). It runs on every tick, so within a second of this node
// applying the change: a session checked against an older generation of
// the table is checked again, and one that fails is revoked. The
// generation is read before a handshake is checked, so a change applied
// while a handshake was being accepted is seen at the next tick. A
// relay's session on the master lives while the namespace exists; the
// relaying node revokes its client's own session, which ends the relay.
func (s *Server) checkRevoked() {
	gen := s.svc.NamespaceGeneration()
	if gen == s.nsGen {
		return
	}
	s.nsGen = gen
	s.conns.Range(func(k, _ any) bool {
		c := k.(*conn)
		a := c.auth.Load()
		if a == nil || a.gen == gen || c.revoked.Load() {
			return true
		}
		if s.stillValid(a) {
			n := *a
			n.gen = gen
			c.auth.CompareAndSwap(a, &n)
			return true
		}
		c.revoke(a)
		return true
	})
}

// revoke ends a session whose authentication was withdrawn: its waiters
// get Granted AUTH_FAILED, its holds Lost with EventRevoked (package
// group's RevokeClient), and the connection closes once those pushes are
// queued. Requests that arrive meanwhile are answered AUTH_FAILED.
func (c *conn) revoke(a *authState) {
	if !c.revoked.CompareAndSwap(false, true) {
		return
	}
	c.s.log.Info("closing client connection: namespace removed or its secret changed",
		"remote", c.remote(), "namespace", a.ns)
	c.s.svc.RevokeClient(a.client, a.ns, c, c.closeAfterFlush)
}

// credentials returns a namespace's verifier from the replicated
// namespace table (the configured namespaces seed it on a new cluster).
func (s *Server) credentials(ns string) (scramauth.Verifier, bool) {
	return s.svc.Credentials(ns, s.seedVerifiers, s.seedSecrets)
}
