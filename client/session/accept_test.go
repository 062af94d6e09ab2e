package session

import (
	"errors"
	"testing"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// host is an Endpoint that records what Accepted asks of it. Its namespace
// "ns" has the secret "s3cret".
type host struct {
	refuse   error // TrustRelay's answer
	version  uint64
	creds    map[string]scramauth.Verifier
	accepted [][2]Identity
	views    []bool // subscribe flags of ServeView calls
	replies  map[uint64]wire.Response
	sent     map[uint64]wire.Message
	refused  []string // namespaces of Refused calls
	// relayAsked: the via of each RelayCredentials call; node 2 is the
	// cluster's only other node, and its relay secret "relay-s3cret".
	relayAsked []uint32
}

func (h *host) Credentials(ns string) (scramauth.Verifier, bool) { v, ok := h.creds[ns]; return v, ok }
func (h *host) TrustRelay(*wire.Hello) error                     { return h.refuse }
func (h *host) RelayCredentials(via uint32, ns string) (scramauth.Verifier, bool) {
	h.relayAsked = append(h.relayAsked, via)
	_, known := h.creds[ns]
	return relayVerifier, known && via == 2
}
func (h *host) Accepted(prev, cur Identity)                 { h.accepted = append(h.accepted, [2]Identity{prev, cur}) }
func (h *host) ViewVersion() uint64                         { return h.version }
func (h *host) ServeView(_ uint64, sub bool)                { h.views = append(h.views, sub) }
func (h *host) Reply(id uint64, r wire.Response)            { h.replies[id] = r }
func (h *host) Send(_ wire.Type, id uint64, m wire.Message) { h.sent[id] = m }
func (h *host) Refused(ns string, _ error)                  { h.refused = append(h.refused, ns) }

// Client keys for the tests' Hellos.
const (
	key5 = "client-key-five!"
	key6 = "client-key-six!!"
)

// keyed gives h the client key key and the client id it derives.
func keyed(h *wire.Hello, key string) *wire.Hello {
	h.ClientKey, h.ClientID = key, wire.ClientIDOf(key)
	return h
}

var nsVerifier = func() scramauth.Verifier {
	v, err := scramauth.NewVerifier("s3cret")
	if err != nil {
		panic(err)
	}
	return v
}()

// relayVerifier is the verifier of the test cluster's relay secret.
var relayVerifier = func() scramauth.Verifier {
	v, err := scramauth.NewVerifier("relay-s3cret")
	if err != nil {
		panic(err)
	}
	return v
}()

func newHost() *host {
	return &host{version: 7, replies: map[uint64]wire.Response{}, sent: map[uint64]wire.Message{},
		creds: map[string]scramauth.Verifier{"ns": nsVerifier}}
}

// sameIdentity compares identities, verifier included.
func sameIdentity(a, b Identity) bool {
	return a.Namespace == b.Namespace && a.ClientID == b.ClientID && a.ClientKey == b.ClientKey &&
		a.Agent == b.Agent && a.Via == b.Via && (a.Verifier.Iters == 0 && b.Verifier.Iters == 0 || a.Verifier.Equal(b.Verifier))
}

// scram runs a SCRAM exchange with secret against a, from request id
// base, and returns the final reply: a ScramServerFinal or a Response.
func scram(t *testing.T, a *Accepted, h *host, base uint64, first wire.ScramClientFirst, secret string) wire.Message {
	t.Helper()
	cl, err := scramauth.NewClient(first.Namespace, secret)
	if err != nil {
		t.Fatal(err)
	}
	first.Mechanism = wire.MechanismSCRAMSHA256
	if first.Message, err = cl.First(); err != nil {
		t.Fatal(err)
	}
	if !a.Handle(base, &first, h) {
		t.Fatal("ScramClientFirst not handled")
	}
	sf, ok := h.sent[base].(*wire.ScramServerFirst)
	if !ok {
		return &wire.Response{Status: h.replies[base].Status, Msg: h.replies[base].Msg}
	}
	final, err := cl.Final(sf.Message)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Handle(base+1, &wire.ScramClientFinal{Message: final}, h) {
		t.Fatal("ScramClientFinal not handled")
	}
	if m, ok := h.sent[base+1].(*wire.ScramServerFinal); ok {
		if err := cl.Verify(m.Message); err != nil {
			t.Fatalf("server not verified: %v", err)
		}
		return m
	}
	r := h.replies[base+1]
	return &r
}

func firstOf(ns, key string) wire.ScramClientFirst {
	return wire.ScramClientFirst{Namespace: ns, ClientID: wire.ClientIDOf(key), ClientKey: key, Agent: "x"}
}

func TestAcceptedSCRAM(t *testing.T) {
	h := newHost()
	var a Accepted
	if a.Authenticated() {
		t.Fatal("a new session is authenticated")
	}
	m := scram(t, &a, h, 1, firstOf("ns", key5), "s3cret")
	if fin, ok := m.(*wire.ScramServerFinal); !ok || fin.ViewVersion != 7 {
		t.Fatalf("final reply %#v", m)
	}
	want := Identity{Namespace: "ns", ClientID: wire.ClientIDOf(key5), ClientKey: key5, Agent: "x", Verifier: nsVerifier}
	if !a.Authenticated() || !sameIdentity(a.Identity(), want) {
		t.Fatalf("identity %+v", a.Identity())
	}
	if len(h.accepted) != 1 || !sameIdentity(h.accepted[0][1], want) {
		t.Fatalf("Accepted calls %+v", h.accepted)
	}
	// A second exchange replaces the identity; Accepted sees both.
	scram(t, &a, h, 3, firstOf("ns", key6), "s3cret")
	if a.Identity().ClientID != wire.ClientIDOf(key6) || len(h.accepted) != 2 || !sameIdentity(h.accepted[1][0], want) {
		t.Fatalf("after a second exchange: %+v, %+v", a.Identity(), h.accepted)
	}
}

func TestAcceptedSCRAMRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		first  wire.ScramClientFirst
		secret string
	}{
		"wrong secret":      {firstOf("ns", key5), "guess"},
		"unknown namespace": {firstOf("nope", key5), "s3cret"},
		"invalid namespace": {firstOf("", key5), "s3cret"},
		"another's id":      {wire.ScramClientFirst{Namespace: "ns", ClientID: wire.ClientIDOf(key5), ClientKey: key6}, "s3cret"},
		"no client key":     {wire.ScramClientFirst{Namespace: "ns", ClientID: 1}, "s3cret"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost()
			var a Accepted
			m := scram(t, &a, h, 1, tc.first, tc.secret)
			r, ok := m.(*wire.Response)
			if !ok || r.Status != wire.StatusAuthFailed || r.Msg == "" {
				t.Fatalf("reply %#v, want AUTH_FAILED with a message", m)
			}
			if a.Authenticated() || len(h.accepted) != 0 {
				t.Fatal("a refused exchange opened the session")
			}
			if len(h.refused) != 1 || h.refused[0] != tc.first.Namespace {
				t.Fatalf("Refused told %q, want once with %q", h.refused, tc.first.Namespace)
			}
		})
	}
}

// TestAcceptedRelaySCRAM: a ScramClientFirst with Via set is a relaying
// node's: the exchange checks the relay secret (Endpoint.RelayCredentials,
// asked with the node it claims), not the namespace's, and opens a
// relay's session (Via set, no verifier). The namespace's secret, the
// relay secret for an unknown namespace or for a node the host does not
// know, and the relay secret without Via are all refused.
func TestAcceptedRelaySCRAM(t *testing.T) {
	h := newHost()
	var a Accepted
	first := firstOf("ns", key5)
	first.Via = 2
	m := scram(t, &a, h, 1, first, "relay-s3cret")
	if _, ok := m.(*wire.ScramServerFinal); !ok {
		t.Fatalf("a relay's exchange with the relay secret: %#v", m)
	}
	want := Identity{Namespace: "ns", ClientID: wire.ClientIDOf(key5), ClientKey: key5, Agent: "x", Via: 2}
	if !a.Authenticated() || !sameIdentity(a.Identity(), want) || len(h.accepted) != 1 || !sameIdentity(h.accepted[0][1], want) {
		t.Fatalf("identity %+v, Accepted calls %+v; want %+v", a.Identity(), h.accepted, want)
	}
	if len(h.relayAsked) != 1 || h.relayAsked[0] != 2 {
		t.Fatalf("RelayCredentials asked for nodes %v, want [2]", h.relayAsked)
	}
	for name, tc := range map[string]struct {
		ns     string
		via    uint32
		secret string
	}{
		"the namespace's secret":         {"ns", 2, "s3cret"},
		"a wrong secret":                 {"ns", 2, "guess"},
		"an unknown namespace":           {"nope", 2, "relay-s3cret"},
		"a node the host does not know":  {"ns", 9, "relay-s3cret"},
		"the relay secret, not as relay": {"ns", 0, "relay-s3cret"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost()
			var a Accepted
			first := firstOf(tc.ns, key5)
			first.Via = tc.via
			m := scram(t, &a, h, 1, first, tc.secret)
			if r, ok := m.(*wire.Response); !ok || r.Status != wire.StatusAuthFailed {
				t.Fatalf("reply %#v, want AUTH_FAILED", m)
			}
			if a.Authenticated() || len(h.accepted) != 0 {
				t.Fatal("a refused exchange opened the session")
			}
		})
	}
}

func TestAcceptedSCRAMFinalAlone(t *testing.T) {
	h := newHost()
	var a Accepted
	a.Handle(1, &wire.ScramClientFinal{Message: "c=biws,r=abc,p=AAAA"}, h)
	if h.replies[1].Status != wire.StatusAuthFailed || a.Authenticated() {
		t.Fatalf("a lone ScramClientFinal: %+v", h.replies[1])
	}
}

// TestAcceptedClearSecretRefused: a client's Hello (protocol version 1,
// the secret in the clear) is refused whatever its secret.
func TestAcceptedClearSecretRefused(t *testing.T) {
	h := newHost()
	var a Accepted
	a.Handle(1, keyed(&wire.Hello{Namespace: "ns", Secret: "s3cret"}, key5), h)
	a.Handle(2, keyed(&wire.Hello{Namespace: "ns", Secret: "s3cret", Via: 3}, key5), h)
	for id := uint64(1); id <= 2; id++ {
		if r := h.replies[id]; r.Status != wire.StatusAuthFailed || r.Msg != ErrClearSecret.Error() {
			t.Fatalf("reply %d %+v, want AUTH_FAILED ErrClearSecret", id, r)
		}
	}
	if a.Authenticated() {
		t.Fatal("a clear-secret Hello opened the session")
	}
}

func TestAcceptedRelayHello(t *testing.T) {
	h := newHost()
	var a Accepted
	if a.Authenticated() {
		t.Fatal("a new session is authenticated")
	}
	hello := &wire.Hello{Namespace: "ns", ClientID: wire.ClientIDOf(key5), ClientKey: key5, Agent: "x", Via: 2}
	if !a.Handle(1, hello, h) {
		t.Fatal("Hello not handled")
	}
	if r := h.replies[1]; r.Status != wire.StatusSuccess || r.ViewVersion != 7 {
		t.Fatalf("reply %+v", r)
	}
	want := Identity{Namespace: "ns", ClientID: wire.ClientIDOf(key5), ClientKey: key5, Agent: "x", Via: 2}
	if !a.Authenticated() || !sameIdentity(a.Identity(), want) {
		t.Fatalf("identity %+v", a.Identity())
	}
	if len(h.accepted) != 1 || !sameIdentity(h.accepted[0][1], want) {
		t.Fatalf("Accepted calls %+v", h.accepted)
	}

	// A second Hello replaces the identity; Accepted sees both.
	a.Handle(2, keyed(&wire.Hello{Namespace: "other", Via: 2}, key6), h)
	if a.Identity().ClientID != wire.ClientIDOf(key6) || len(h.accepted) != 2 || !sameIdentity(h.accepted[1][0], want) {
		t.Fatalf("after a second Hello: %+v, %+v", a.Identity(), h.accepted)
	}
}

func TestAcceptedRelayHelloRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		hello  *wire.Hello
		refuse error
	}{
		"invalid namespace": {keyed(&wire.Hello{Namespace: "", Via: 2}, key5), nil},
		"zero client id":    {&wire.Hello{Namespace: "ns", Via: 2}, nil},
		"no client key":     {&wire.Hello{Namespace: "ns", ClientID: 1, Via: 2}, nil},
		"another's id":      {&wire.Hello{Namespace: "ns", ClientID: wire.ClientIDOf(key5), ClientKey: key6, Via: 2}, nil},
		"host refuses":      {keyed(&wire.Hello{Namespace: "ns", Via: 2}, key5), errors.New("relay not trusted")},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost()
			h.refuse = tc.refuse
			var a Accepted
			a.Handle(3, tc.hello, h)
			r := h.replies[3]
			if r.Status != wire.StatusAuthFailed || r.Msg == "" {
				t.Fatalf("reply %+v, want AUTH_FAILED with a message", r)
			}
			if tc.refuse != nil && r.Msg != tc.refuse.Error() {
				t.Fatalf("message %q, want the host's", r.Msg)
			}
			if a.Authenticated() || len(h.accepted) != 0 {
				t.Fatal("a refused Hello opened the session")
			}
		})
	}
}

func TestAcceptedRefusedKeepsIdentity(t *testing.T) {
	h := newHost()
	var a Accepted
	scram(t, &a, h, 1, firstOf("ns", key5), "s3cret")
	scram(t, &a, h, 3, firstOf("ns", key6), "wrong")
	if !a.Authenticated() || a.Identity().Namespace != "ns" {
		t.Fatalf("identity after a refused second Hello: %+v", a.Identity())
	}
}

func TestAcceptedSessionRequests(t *testing.T) {
	h := newHost()
	var a Accepted
	// Before any handshake: Heartbeat and the views are served (views
	// are public on purpose: see viewsNeedHello).
	if !a.Handle(4, &wire.Heartbeat{}, h) || h.replies[4].Status != wire.StatusSuccess || h.replies[4].ViewVersion != 7 {
		t.Fatalf("Heartbeat: %+v", h.replies[4])
	}
	a.Handle(5, &wire.GetView{}, h)
	a.Handle(6, &wire.SubscribeView{}, h)
	if viewsNeedHello {
		if len(h.views) != 0 || h.replies[5].Status != wire.StatusAuthFailed {
			t.Fatalf("views served before Hello: %v", h.views)
		}
	} else if len(h.views) != 2 || h.views[0] || !h.views[1] {
		t.Fatalf("ServeView calls %v, want GetView then SubscribeView", h.views)
	}
	if a.Handle(7, &wire.State{Key: "k"}, h) {
		t.Fatal("a lock request was handled as a session request")
	}
	if _, ok := h.replies[7]; ok {
		t.Fatal("a lock request was answered")
	}
}

func TestIsSessionType(t *testing.T) {
	for typ := range wire.Type(255) {
		m := wire.NewMessage(typ)
		if m == nil {
			continue
		}
		h := newHost()
		var a Accepted
		if got, want := IsSessionType(typ), a.Handle(1, m, h); got != want {
			t.Errorf("%s: IsSessionType %v, Handle %v", typ, got, want)
		}
	}
}
