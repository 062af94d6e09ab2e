package session

import "github.com/paxlock/paxlock/wire"

// viewsNeedHello says whether GetView and SubscribeView need an
// authenticated session. They do not today: views are public, and the
// registry follows a cluster without a Hello. Issue 13 (authentication)
// sets it to true; Accepted.Handle then refuses them AUTH_FAILED before a
// Hello.
const viewsNeedHello = false

// Identity is who an accepted Hello says the peer is.
type Identity struct {
	// Namespace is the tenant every later request belongs to.
	Namespace string
	// Secret is the namespace's secret as the client sent it, kept so
	// that a node can relay the client's requests under its Hello. Never
	// log it.
	Secret string
	// ClientID is the client's Owner.Client value, derived from
	// ClientKey (wire.ClientIDOf): a request whose Owner names another
	// client is not the session's to make.
	ClientID uint64
	// ClientKey is the key the Hello proved ClientID with, kept (like
	// Secret) so that a node can relay the client's requests under its
	// Hello. Never log it.
	ClientKey string
	// Agent names the client library, for logs.
	Agent string
	// Via is the relaying node's id for a relay's session, 0 otherwise.
	Via uint32
}

// Host is what the accepting side of a session needs from the program
// that accepted it: the paxlock node or the registry. Accepted calls it on
// the goroutine (or event loop) that calls Handle.
type Host interface {
	// Authenticate decides a Hello that is well formed: nil accepts it;
	// an error refuses it with AUTH_FAILED and the error's text. The
	// session is unchanged until it accepts.
	Authenticate(h *wire.Hello) error
	// Accepted is told that a Hello was accepted: cur is the session's
	// identity now, prev the one it replaced (the zero Identity on the
	// first Hello).
	Accepted(prev, cur Identity)
	// ViewVersion is the version of the view the connection is served
	// (for the replies to Hello and Heartbeat; 0 if none).
	ViewVersion() uint64
	// ServeView answers GetView (subscribe false) or SubscribeView: a View
	// with reqID, and for a subscription every later view as a push.
	ServeView(reqID uint64, subscribe bool)
	// Reply sends a Response to request reqID.
	Reply(reqID uint64, r wire.Response)
}

// Accepted is the accepting side of one session: whether a Hello opened
// it and who it said the peer is. Its zero value is a new connection's.
// It is not safe for concurrent use: keep it with the connection's reader.
type Accepted struct {
	authenticated bool
	id            Identity
}

// Authenticated reports whether a Hello has been accepted. Requests other
// than the session's own (see Handle) need it.
func (a *Accepted) Authenticated() bool { return a.authenticated }

// Identity is what the accepted Hello said (the zero Identity before
// one).
func (a *Accepted) Identity() Identity { return a.id }

// IsSessionType reports whether typ is one of the session's own requests,
// which Handle answers: Hello, Heartbeat, GetView, SubscribeView.
func IsSessionType(typ wire.Type) bool {
	switch typ {
	case wire.TypeHello, wire.TypeHeartbeat, wire.TypeGetView, wire.TypeSubscribeView:
		return true
	}
	return false
}

// Handle answers m, the decoded body of request reqID, if it is one of
// the session's own requests, and reports whether it was; other requests
// are the caller's.
//
//   - Hello: an invalid one (among others, one whose ClientKey does not
//     derive its ClientID: see wire.ClientIDOf), or one that
//     h.Authenticate refuses, is
//     answered AUTH_FAILED and leaves the session as it was; an accepted
//     one becomes the session's identity (a later Hello replaces it) and
//     is answered SUCCESS with h.ViewVersion().
//   - Heartbeat: SUCCESS with h.ViewVersion(), with or without a Hello.
//   - GetView, SubscribeView: h.ServeView, with or without a Hello (see
//     viewsNeedHello).
func (a *Accepted) Handle(reqID uint64, m wire.Message, h Host) bool {
	switch m := m.(type) {
	case *wire.Hello:
		if err := m.Validate(); err != nil {
			h.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: err.Error()})
			return true
		}
		if err := h.Authenticate(m); err != nil {
			h.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: err.Error()})
			return true
		}
		prev := a.id
		a.authenticated = true
		a.id = Identity{Namespace: m.Namespace, Secret: m.Secret, ClientID: m.ClientID, ClientKey: m.ClientKey, Agent: m.Agent, Via: m.Via}
		h.Accepted(prev, a.id)
		h.Reply(reqID, wire.Response{Status: wire.StatusSuccess, ViewVersion: h.ViewVersion()})
	case *wire.Heartbeat:
		h.Reply(reqID, wire.Response{Status: wire.StatusSuccess, ViewVersion: h.ViewVersion()})
	case *wire.GetView, *wire.SubscribeView:
		if viewsNeedHello && !a.authenticated {
			h.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "send Hello first"})
			return true
		}
		_, sub := m.(*wire.SubscribeView)
		h.ServeView(reqID, sub)
	default:
		return false
	}
	return true
}
