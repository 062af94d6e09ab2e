package fakewire

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/internal/testutil"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

const (
	testNS     = "ns"
	testSecret = "s3cret"
	testKey    = "fakewire-test-client-key"
)

var testVerifier = MustVerifier(testSecret)

// frame is one frame a test client received, decoded.
type frame struct {
	typ   wire.Type
	reqID uint64
	m     wire.Message
}

// client is the real dialing side of a session, collecting what arrives.
type client struct {
	c      *session.Conn
	frames chan frame
	next   uint64
}

func (cl *client) Frame(f wire.Frame, _ []byte) {
	m, err := wire.Decode(f.Type, f.Body)
	if err != nil {
		panic(err)
	}
	cl.frames <- frame{f.Type, f.ReqID, m}
}
func (cl *client) Heartbeat(*wire.Response) {}
func (cl *client) Closed(error)             {}

func handshake(secret string) session.Handshake {
	return session.SCRAM(wire.ScramClientFirst{Namespace: testNS, ClientID: wire.ClientIDOf(testKey), ClientKey: testKey, Agent: "test"}, secret)
}

// dial opens a session to s with cfg and serves it until the test ends.
func dial(t *testing.T, s *Server, cfg session.Config) (*client, wire.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, r, err := session.Dial(ctx, s.Addr(), cfg)
	if err != nil {
		return nil, r, err
	}
	cl := &client{c: c, frames: make(chan frame, 64)}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = c.Run(cl)
	}()
	t.Cleanup(func() {
		c.Close(nil)
		<-ran
	})
	return cl, r, nil
}

// call sends one request and returns its reply.
func (cl *client) call(t *testing.T, typ wire.Type, m wire.Message) frame {
	t.Helper()
	cl.next++
	if err := cl.c.Append(typ, cl.next, m); err != nil {
		t.Fatal(err)
	}
	f := cl.recv(t)
	if f.reqID != cl.next {
		t.Fatalf("reply to %s: %s for request %d", typ, f.typ, f.reqID)
	}
	return f
}

// recv returns the next frame received.
func (cl *client) recv(t *testing.T) frame {
	t.Helper()
	select {
	case f := <-cl.frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no frame")
		return frame{}
	}
}

func status(f frame) wire.Status {
	if r, ok := f.m.(*wire.Response); ok {
		return r.Status
	}
	return 0
}

func TestHandshakeHandlersAndPushes(t *testing.T) {
	var mu sync.Mutex
	var firsts []string
	s := New(t, Config{
		Verifiers:   map[string]scramauth.Verifier{testNS: testVerifier},
		ViewVersion: func() uint64 { return 7 },
		Observe: func(_ *Conn, _ uint64, m wire.Message) {
			if f, ok := m.(*wire.ScramClientFirst); ok {
				mu.Lock()
				firsts = append(firsts, f.Namespace)
				mu.Unlock()
			}
		},
	})
	s.Handle(wire.TypeState, func(c *Conn, reqID uint64, m wire.Message) {
		if c.Identity().Namespace != testNS {
			t.Errorf("State from %+v", c.Identity())
		}
		c.Reply(reqID, wire.Response{Status: wire.StatusSuccess, Token: 42})
	})
	s.Handle(wire.TypeSubscribeView, func(c *Conn, reqID uint64, _ wire.Message) {
		c.Send(wire.TypeView, reqID, &wire.View{Version: 7})
	})

	cl, r, err := dial(t, s, session.Config{Handshake: handshake(testSecret)})
	if err != nil || r.Status != wire.StatusSuccess || r.ViewVersion != 7 {
		t.Fatalf("handshake: %+v %v", r, err)
	}
	if f := cl.call(t, wire.TypeState, &wire.State{Key: "k"}); f.m.(*wire.Response).Token != 42 {
		t.Fatalf("State: %+v", f.m)
	}
	if f := cl.call(t, wire.TypeSubscribeView, &wire.SubscribeView{}); f.typ != wire.TypeView {
		t.Fatalf("SubscribeView: %s", f.typ)
	}
	if f := cl.call(t, wire.TypeGetView, &wire.GetView{}); status(f) != wire.StatusBadRequest {
		t.Fatalf("GetView without a handler: %+v", f.m)
	}
	if f := cl.call(t, wire.TypeRelease, &wire.Release{Key: "k", Owner: wire.Owner{Client: 1, ID: 1}, Token: 1}); status(f) != wire.StatusBadRequest {
		t.Fatalf("Release without a handler: %+v", f.m)
	}
	if f := cl.call(t, wire.TypeHeartbeat, &wire.Heartbeat{}); status(f) != wire.StatusSuccess || f.m.(*wire.Response).ViewVersion != 7 {
		t.Fatalf("Heartbeat: %+v", f.m)
	}

	conns := s.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	conns[0].Send(wire.TypeViewChanged, 0, &wire.View{Version: 8})
	if f := cl.recv(t); f.typ != wire.TypeViewChanged || f.m.(*wire.View).Version != 8 {
		t.Fatalf("push: %s %+v", f.typ, f.m)
	}
	for typ, want := range map[wire.Type]int{
		wire.TypeScramClientFirst: 1, wire.TypeScramClientFinal: 1, wire.TypeState: 1,
		wire.TypeSubscribeView: 1, wire.TypeGetView: 1, wire.TypeRelease: 1, wire.TypeHeartbeat: 1,
	} {
		if got := s.Count(typ); got != want {
			t.Errorf("Count(%s) = %d, want %d", typ, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(firsts) != 1 || firsts[0] != testNS {
		t.Fatalf("observed ScramClientFirsts: %v", firsts)
	}
}

func TestRefusals(t *testing.T) {
	s := New(t, Config{Verifiers: map[string]scramauth.Verifier{testNS: testVerifier}})
	s.Handle(wire.TypeState, func(c *Conn, reqID uint64, _ wire.Message) {
		c.Reply(reqID, wire.Response{Status: wire.StatusSuccess})
	})
	var refused *session.RefusedError
	if _, _, err := dial(t, s, session.Config{Handshake: handshake("guess")}); !errors.As(err, &refused) || refused.Reply.Status != wire.StatusAuthFailed {
		t.Fatalf("wrong secret: %v", err)
	}
	cl, _, err := dial(t, s, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if f := cl.call(t, wire.TypeState, &wire.State{Key: "k"}); status(f) != wire.StatusAuthFailed {
		t.Fatalf("State before a handshake: %+v", f.m)
	}
	if f := cl.call(t, wire.TypeState, &wire.State{}); status(f) != wire.StatusBadRequest {
		t.Fatalf("invalid State: %+v", f.m)
	}
	if f := cl.call(t, wire.TypeHeartbeat, &wire.Heartbeat{}); status(f) != wire.StatusSuccess {
		t.Fatalf("Heartbeat before a handshake: %+v", f.m)
	}
	if f := cl.call(t, wire.TypeResponse, &wire.Response{}); status(f) != wire.StatusBadRequest {
		t.Fatalf("a reply type as a request: %+v", f.m)
	}
}

func TestFreezeAndClose(t *testing.T) {
	closed := make(chan *Conn, 4)
	s := New(t, Config{Verifiers: map[string]scramauth.Verifier{testNS: testVerifier}, Closed: func(c *Conn) { closed <- c }})
	cl, _, err := dial(t, s, session.Config{Handshake: handshake(testSecret),
		HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "heartbeats", func() bool { return s.Count(wire.TypeHeartbeat) >= 2 })
	s.Freeze(true)
	select {
	case <-cl.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the client kept a frozen server's connection")
	}
	if err := cl.c.Err(); !errors.Is(err, session.ErrHeartbeatTimeout) {
		t.Fatalf("session ended with %v, want a heartbeat timeout", err)
	}
	frozen := s.Count(wire.TypeHeartbeat)
	waitUntil(t, "the connection closed", func() bool { return len(s.Conns()) == 0 })
	<-closed
	if got := s.Count(wire.TypeHeartbeat); got != frozen {
		t.Fatalf("%d Heartbeats counted while frozen", got-frozen)
	}

	s.Freeze(false)
	cl, _, err = dial(t, s, session.Config{Handshake: handshake(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	s.CloseConns()
	select {
	case <-cl.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("CloseConns left the connection open")
	}
	<-closed
	s.Close()
	if _, _, err := dial(t, s, session.Config{}); err == nil {
		t.Fatal("dialed a closed server")
	}
}

// waitUntil polls cond until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := testutil.Wait(10*time.Second, cond); err != nil {
		t.Fatalf("%v waiting for %s", err, what)
	}
}
