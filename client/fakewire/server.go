package fakewire

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// Handler answers one request, the decoded body m of request reqID on
// connection c, typically with c.Reply or c.Send. It runs on c's reader
// goroutine: the connection reads nothing more until it returns, and a
// Handler that blocks stalls that connection only.
type Handler func(c *Conn, reqID uint64, m wire.Message)

// Config is what a Server needs from its test. Every field is optional.
type Config struct {
	// Verifiers are the namespaces a client may authenticate in, each
	// with its secret's verifier (see MustVerifier). A handshake for any
	// other namespace, or with a wrong secret, is refused AUTH_FAILED.
	Verifiers map[string]scramauth.Verifier
	// ViewVersion is the view version the handshake's and Heartbeat's
	// replies carry (nil: 0).
	ViewVersion func() uint64
	// Observe is told every request a connection decoded, before it is
	// answered, on the connection's reader goroutine.
	Observe func(c *Conn, reqID uint64, m wire.Message)
	// Closed is told that a connection ended, after its socket was
	// closed, on the connection's reader goroutine.
	Closed func(c *Conn)
	// Refuse, when set and true for a namespace, refuses its handshakes
	// AUTH_FAILED whatever Verifiers holds: a namespace removed, or its
	// secret changed, while clients are connected. It is asked on the
	// connection's reader goroutine.
	Refuse func(ns string) bool
}

// Server is a fake node listening on a loopback port: see the package
// doc. Its methods are safe for concurrent use, and never call a Handler
// or Config's functions: a test may call them under a lock of its own.
// Close is the exception: it waits for the Handlers under way, so it must
// not be called from one, nor under a lock they take.
type Server struct {
	t   testing.TB
	cfg Config
	ln  net.Listener
	wg  sync.WaitGroup // the accept loop and the connections' readers

	mu       sync.Mutex
	handlers map[wire.Type]Handler
	conns    map[*Conn]struct{}
	counts   map[wire.Type]int
	frozen   bool
	closed   bool
}

// New starts a Server on 127.0.0.1 with a free port; t's cleanup closes
// it.
func New(t testing.TB, cfg Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakewire: listen: %v", err)
	}
	s := &Server{
		t: t, cfg: cfg, ln: ln,
		handlers: make(map[wire.Type]Handler),
		conns:    make(map[*Conn]struct{}),
		counts:   make(map[wire.Type]int),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.Close)
	return s
}

// MustVerifier returns the verifier of secret, and panics if it cannot be
// made: for a test's package-level verifiers.
func MustVerifier(secret string) scramauth.Verifier {
	v, err := scramauth.NewVerifier(secret)
	if err != nil {
		panic(fmt.Sprintf("fakewire: verifier: %v", err))
	}
	return v
}

// Addr is the address the Server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Handle makes h the answer to requests of type typ (replacing any
// earlier one). A type without a Handler is answered BAD_REQUEST. The
// session answers its own requests (session.IsSessionType) itself, except
// GetView and SubscribeView, which it hands to their Handlers; Handle
// panics for the others.
func (s *Server) Handle(typ wire.Type, h Handler) {
	if session.IsSessionType(typ) && typ != wire.TypeGetView && typ != wire.TypeSubscribeView {
		panic("fakewire: the session answers " + typ.String())
	}
	s.mu.Lock()
	s.handlers[typ] = h
	s.mu.Unlock()
}

// Count is how many requests of type typ the Server received while not
// frozen, handshake messages and Heartbeats included.
func (s *Server) Count(typ wire.Type) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[typ]
}

// Freeze makes the Server read every frame and answer none, nor count
// it (on true), as a node that hangs with its sockets open; false thaws
// it.
func (s *Server) Freeze(on bool) {
	s.mu.Lock()
	s.frozen = on
	s.mu.Unlock()
}

// Conns returns the open connections.
func (s *Server) Conns() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs
}

// CloseConns closes every open connection; the Server goes on accepting
// new ones.
func (s *Server) CloseConns() {
	for _, c := range s.Conns() {
		c.Close()
	}
}

// Close stops the Server like a crash: it stops listening, closes every
// connection and waits until their readers have ended. Later calls do
// nothing.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
	s.CloseConns()
	s.wg.Wait()
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &Conn{s: s, nc: nc}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// received counts a frame of type typ, and reports whether to answer it:
// not while frozen.
func (s *Server) received(typ wire.Type) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		return false
	}
	s.counts[typ]++
	return true
}

func (s *Server) handler(typ wire.Type) Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handlers[typ]
}

// Conn is one client connection to a Server. It implements session.Endpoint
// for its session, so that the session's handshake and Heartbeat are
// answered by the real accepting side; tests use Send, Reply, Close and
// Identity.
type Conn struct {
	s    *Server
	nc   net.Conn
	sess session.Accepted // the reader goroutine's

	wmu sync.Mutex
	enc wire.Codec
}

// Identity is who the connection's handshake said the client is (the
// zero Identity before one). Call it from a Handler.
func (c *Conn) Identity() session.Identity { return c.sess.Identity() }

// Close closes the connection; its reader then ends and Config.Closed is
// told.
func (c *Conn) Close() { c.nc.Close() }

// Send writes one frame to the client at once: a reply to request reqID,
// or a push (reqID 0). A connection that is closed drops it. It is safe
// for concurrent use, and frames sent by one goroutine arrive in order.
// It implements session.Endpoint.
func (c *Conn) Send(typ wire.Type, reqID uint64, m wire.Message) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, err := c.enc.AppendFrame(nil, typ, reqID, m)
	if err != nil {
		c.s.t.Errorf("fakewire: encode %s: %v", typ, err)
		return
	}
	_, _ = c.nc.Write(b)
}

// Reply sends r as the Response to request reqID; see Send. It implements
// session.Endpoint.
func (c *Conn) Reply(reqID uint64, r wire.Response) { c.Send(wire.TypeResponse, reqID, &r) }

// Credentials implements session.Endpoint with Config.Verifiers.
func (c *Conn) Credentials(ns string) (scramauth.Verifier, bool) {
	if f := c.s.cfg.Refuse; f != nil && f(ns) {
		return scramauth.Verifier{}, false
	}
	v, ok := c.s.cfg.Verifiers[ns]
	return v, ok
}

// errNoRelays refuses a relay's handshake: a fake node is no cluster's.
var errNoRelays = errors.New("fakewire: this fake node takes no relays")

// TrustRelay implements session.Endpoint: a fake node takes no relays.
func (c *Conn) TrustRelay(*wire.Hello) error { return errNoRelays }

// RelayCredentials implements session.Endpoint: a fake node takes no relays.
func (c *Conn) RelayCredentials(uint32, string) (scramauth.Verifier, bool) {
	return scramauth.Verifier{}, false
}

// Accepted implements session.Endpoint; the session keeps the identity.
func (c *Conn) Accepted(_, _ session.Identity) {}

// Refused implements session.Endpoint; the client reads the refusal.
func (c *Conn) Refused(string, error) {}

// ViewVersion implements session.Endpoint with Config.ViewVersion.
func (c *Conn) ViewVersion() uint64 {
	if f := c.s.cfg.ViewVersion; f != nil {
		return f()
	}
	return 0
}

// ServeView implements session.Endpoint: GetView and SubscribeView go to
// their Handlers.
func (c *Conn) ServeView(reqID uint64, subscribe bool) {
	typ, m := wire.TypeGetView, wire.Message(&wire.GetView{})
	if subscribe {
		typ, m = wire.TypeSubscribeView, &wire.SubscribeView{}
	}
	c.dispatch(typ, reqID, m)
}

// dispatch hands a request to its Handler, or answers BAD_REQUEST.
func (c *Conn) dispatch(typ wire.Type, reqID uint64, m wire.Message) {
	h := c.s.handler(typ)
	if h == nil {
		c.Reply(reqID, wire.Response{Status: wire.StatusBadRequest, Msg: "fakewire: no handler for " + typ.String()})
		return
	}
	h(c, reqID, m)
}

// serve reads the connection's frames until it ends, answering each in
// turn.
func (c *Conn) serve() {
	s := c.s
	defer s.wg.Done()
	defer func() {
		c.nc.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		if f := s.cfg.Closed; f != nil {
			f(c)
		}
	}()
	br := bufio.NewReader(c.nc)
	var buf []byte
	var dec wire.Codec
	for {
		f, nb, err := wire.ReadFrame(br, buf, 0)
		buf = nb
		if err != nil {
			return
		}
		if s.received(f.Type) {
			c.handle(f, &dec)
		}
	}
}

// handle answers one frame in the order a node does (session's
// DecodeRequest and Accepted.Admit, the prelude the node runs too): the
// frame's type, its body, the session's own requests, the request's
// validity, the handshake, and then the request's Handler.
func (c *Conn) handle(f wire.Frame, dec *wire.Codec) {
	m, ok := session.DecodeRequest(f, func(f wire.Frame) (wire.Message, error) { return dec.Decode(f.Type, f.Body) }, c)
	if !ok {
		return
	}
	if obs := c.s.cfg.Observe; obs != nil {
		obs(c, f.ReqID, m)
	}
	if c.sess.Admit(f.ReqID, m, c) {
		c.dispatch(f.Type, f.ReqID, m)
	}
}
