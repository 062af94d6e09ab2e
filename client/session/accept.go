package session

import (
	"errors"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// viewsNeedHello says whether GetView and SubscribeView need an
// authenticated session. They do not: views are public on purpose. A view
// holds no namespace data (no keys, holders or secrets), only what a
// client needs before it can authenticate anywhere: the nodes' client
// addresses and which node masters each group; and the registry follows a
// cluster's views without authenticating. With it true, Accepted.Handle
// would refuse them AUTH_FAILED before authentication.
const viewsNeedHello = false

// ErrClearSecret refuses a Hello from a client, which would carry the
// namespace's secret in the clear (protocol version 1's handshake): since
// protocol version 2 clients authenticate with SCRAM-SHA-256
// (wire.ScramClientFirst). Only a relay's Hello (Via set) is accepted, and
// only if the Endpoint trusts the relaying node.
var ErrClearSecret = errors.New("a Hello with a secret in the clear is protocol version 1's handshake and is refused: upgrade the client (this server needs SCRAM-SHA-256)")

// Identity is who an accepted handshake says the peer is.
type Identity struct {
	// Namespace is the tenant every later request belongs to.
	Namespace string
	// ClientID is the client's Owner.Client value, derived from
	// ClientKey (wire.ClientIDOf): a request whose Owner names another
	// client is not the session's to make.
	ClientID uint64
	// ClientKey is the key the handshake proved ClientID with, kept so
	// that a node can relay the client's requests under its identity.
	// Never log it.
	ClientKey string
	// Agent names the client library, for logs.
	Agent string
	// Via is the relaying node's id for a relay's session, 0 otherwise.
	Via uint32
	// Verifier is the namespace's verifier that the SCRAM exchange was
	// checked against (the zero Verifier for a relay's session, whose
	// exchange, if any, proved the relay secret): the session stays
	// valid while the namespace's verifier is this one.
	Verifier scramauth.Verifier
}

// Endpoint is the accepting end of one connection: what the accepting
// side of a session needs from the program that accepted it (the paxlock
// node's, the registry's and the fake server's connections). Accepted
// calls it on the goroutine (or event loop) that calls Handle. (Conn is
// the dialing end.)
type Endpoint interface {
	// Credentials returns namespace ns's SCRAM verifier, false if the
	// namespace does not exist (the exchange then fails, without telling
	// the client which of namespace and secret was wrong).
	Credentials(ns string) (scramauth.Verifier, bool)
	// TrustRelay decides a relay's Hello (Via set, no secret): nil
	// accepts it, an error refuses it with AUTH_FAILED and the error's
	// text. Nothing in the Hello proves who sent it, so an Endpoint must
	// refuse it unless the connection itself proves that it comes from
	// node Via (a verified TLS client certificate naming that node).
	TrustRelay(h *wire.Hello) error
	// RelayCredentials returns the verifier a relaying node's SCRAM
	// exchange (a ScramClientFirst with Via set) must prove, for a relay
	// of node via speaking for a client of namespace ns: the cluster's
	// relay secret's. False refuses it: no relay secret, an unknown
	// namespace, or a via that is no node of the cluster (the exchange
	// then fails at the proof, as a client's for an unknown namespace).
	RelayCredentials(via uint32, ns string) (scramauth.Verifier, bool)
	// Accepted is told that a handshake was accepted: cur is the
	// session's identity now, prev the one it replaced (the zero Identity
	// on the first).
	Accepted(prev, cur Identity)
	// ViewVersion is the version of the view the connection is served
	// (for the replies to the handshake and to Heartbeat; 0 if none).
	ViewVersion() uint64
	// ServeView answers GetView (subscribe false) or SubscribeView: a View
	// with reqID, and for a subscription every later view as a push.
	ServeView(reqID uint64, subscribe bool)
	// Reply sends a Response to request reqID.
	Reply(reqID uint64, r wire.Response)
	// Send sends a reply other than a Response (the SCRAM server
	// messages) to request reqID.
	Send(typ wire.Type, reqID uint64, m wire.Message)
	// Refused is told that a handshake step was refused AUTH_FAILED, with
	// the namespace it claimed ("" when none) and why: for the node's
	// metrics and logs. Nothing secret is in err.
	Refused(namespace string, err error)
}

// Accepted is the accepting side of one session: whether a handshake
// opened it and who it said the peer is. Its zero value is a new
// connection's. It is not safe for concurrent use: keep it with the
// connection's reader.
type Accepted struct {
	authenticated bool
	id            Identity

	// A SCRAM exchange under way: its server side and the identity its
	// ScramClientFirst claimed.
	scram   *scramauth.Server
	pending Identity
}

// Authenticated reports whether a handshake has been accepted. Requests
// other than the session's own (see Handle) need it.
func (a *Accepted) Authenticated() bool { return a.authenticated }

// Identity is what the accepted handshake said (the zero Identity before
// one).
func (a *Accepted) Identity() Identity { return a.id }

// IsSessionType reports whether typ is one of the session's own requests,
// which Handle answers: the handshake's (ScramClientFirst,
// ScramClientFinal, a relay's Hello), Heartbeat, GetView, SubscribeView.
func IsSessionType(typ wire.Type) bool {
	switch typ {
	case wire.TypeHello, wire.TypeScramClientFirst, wire.TypeScramClientFinal,
		wire.TypeHeartbeat, wire.TypeGetView, wire.TypeSubscribeView:
		return true
	}
	return false
}

func refuse(h Endpoint, reqID uint64, ns string, err error) {
	h.Refused(ns, err)
	h.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: err.Error()})
}

// Handle answers m, the decoded body of request reqID, if it is one of
// the session's own requests, and reports whether it was; other requests
// are the caller's.
//
//   - ScramClientFirst starts a SCRAM-SHA-256 exchange (see wire's
//     handshake doc): an invalid one (among others, one whose ClientKey
//     does not derive its ClientID: see wire.ClientIDOf) is answered
//     AUTH_FAILED, a valid one ScramServerFirst, whether or not the
//     namespace exists. With Via set it is a relaying node's: the
//     exchange checks the verifier h.RelayCredentials returns, and the
//     session it opens is a relay's (Identity.Via set, no Verifier).
//   - ScramClientFinal ends it: a wrong proof, an unknown namespace, or
//     no exchange under way is answered AUTH_FAILED and leaves the session
//     as it was; a right proof makes the identity the first message
//     claimed the session's (a later handshake replaces it) and is
//     answered ScramServerFinal with h.ViewVersion().
//   - Hello: a client's (Via 0) is refused, ErrClearSecret; a relay's is
//     accepted if it is valid and h.TrustRelay accepts it, answered
//     SUCCESS with h.ViewVersion().
//   - Heartbeat: SUCCESS with h.ViewVersion(), with or without a
//     handshake.
//   - GetView, SubscribeView: h.ServeView, with or without a handshake
//     (see viewsNeedHello).
func (a *Accepted) Handle(reqID uint64, m wire.Message, h Endpoint) bool {
	switch m := m.(type) {
	case *wire.ScramClientFirst:
		a.scram = nil
		if err := m.Validate(); err != nil {
			refuse(h, reqID, m.Namespace, err)
			return true
		}
		lookup := h.Credentials
		if via := m.Via; via != 0 {
			lookup = func(ns string) (scramauth.Verifier, bool) { return h.RelayCredentials(via, ns) }
		}
		srv, err := scramauth.NewServer(m.Namespace, lookup)
		if err != nil {
			refuse(h, reqID, m.Namespace, err)
			return true
		}
		first, err := srv.First(m.Message)
		if err != nil {
			refuse(h, reqID, m.Namespace, err)
			return true
		}
		a.scram = srv
		a.pending = Identity{Namespace: m.Namespace, ClientID: m.ClientID, ClientKey: m.ClientKey, Agent: m.Agent, Via: m.Via}
		h.Send(wire.TypeScramServerFirst, reqID, &wire.ScramServerFirst{Message: first})
	case *wire.ScramClientFinal:
		srv := a.scram
		a.scram = nil
		if srv == nil {
			refuse(h, reqID, "", errors.New("send ScramClientFirst first"))
			return true
		}
		if err := m.Validate(); err != nil {
			refuse(h, reqID, a.pending.Namespace, err)
			return true
		}
		final, v, err := srv.Final(m.Message)
		if err != nil {
			refuse(h, reqID, a.pending.Namespace, err)
			return true
		}
		cur := a.pending
		if cur.Via == 0 {
			cur.Verifier = v // a relay's proved the relay secret, not the namespace's
		}
		a.accept(cur, h)
		h.Send(wire.TypeScramServerFinal, reqID, &wire.ScramServerFinal{Message: final, ViewVersion: h.ViewVersion()})
	case *wire.Hello:
		if m.Via == 0 || m.Secret != "" {
			refuse(h, reqID, m.Namespace, ErrClearSecret)
			return true
		}
		if err := m.Validate(); err != nil {
			refuse(h, reqID, m.Namespace, err)
			return true
		}
		if err := h.TrustRelay(m); err != nil {
			refuse(h, reqID, m.Namespace, err)
			return true
		}
		a.accept(Identity{Namespace: m.Namespace, ClientID: m.ClientID, ClientKey: m.ClientKey, Agent: m.Agent, Via: m.Via}, h)
		h.Reply(reqID, wire.Response{Status: wire.StatusSuccess, ViewVersion: h.ViewVersion()})
	case *wire.Heartbeat:
		h.Reply(reqID, wire.Response{Status: wire.StatusSuccess, ViewVersion: h.ViewVersion()})
	case *wire.GetView, *wire.SubscribeView:
		if viewsNeedHello && !a.authenticated {
			h.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "authenticate first"})
			return true
		}
		_, sub := m.(*wire.SubscribeView)
		h.ServeView(reqID, sub)
	default:
		return false
	}
	return true
}

func (a *Accepted) accept(cur Identity, h Endpoint) {
	prev := a.id
	a.authenticated = true
	a.id = cur
	a.pending = Identity{}
	h.Accepted(prev, cur)
}
