package registry

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/fakewire"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// fakeNode is a tiny cluster node: a fakewire.Server whose session
// answers the upstream handshake (namespace "billing", secret "s3cret")
// and Heartbeat, and which answers GetView and SubscribeView with its
// view and pushes ViewChanged to its subscribers.
type fakeNode struct {
	srv *fakewire.Server

	mu     sync.Mutex
	view   *wire.View
	subs   map[*fakewire.Conn]bool
	hellos []wire.ScramClientFirst // upstream handshakes
}

func newFakeNode(t *testing.T, v *wire.View) *fakeNode {
	t.Helper()
	f := &fakeNode{view: v, subs: map[*fakewire.Conn]bool{}}
	f.srv = fakewire.New(t, fakewire.Config{
		Verifiers: map[string]scramauth.Verifier{"billing": upstreamVerifier},
		ViewVersion: func() uint64 {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.view.Version
		},
		Observe: f.observe,
		Closed:  f.forget,
	})
	f.srv.Handle(wire.TypeGetView, f.serveView)
	f.srv.Handle(wire.TypeSubscribeView, f.serveView)
	return f
}

func (f *fakeNode) Addr() string { return f.srv.Addr() }

// observe records the upstream handshakes, refused ones included.
func (f *fakeNode) observe(_ *fakewire.Conn, _ uint64, m wire.Message) {
	if m, ok := m.(*wire.ScramClientFirst); ok {
		f.mu.Lock()
		f.hellos = append(f.hellos, *m)
		f.mu.Unlock()
	}
}

// serveView answers GetView, or SubscribeView and records the subscriber.
func (f *fakeNode) serveView(c *fakewire.Conn, id uint64, m wire.Message) {
	f.mu.Lock()
	if _, ok := m.(*wire.SubscribeView); ok {
		f.subs[c] = true
	}
	v := f.view
	f.mu.Unlock()
	c.Send(wire.TypeView, id, v)
}

// forget drops a closed connection's subscription.
func (f *fakeNode) forget(c *fakewire.Conn) {
	f.mu.Lock()
	delete(f.subs, c)
	f.mu.Unlock()
}

// Push makes v the node's view and pushes it to subscribers.
func (f *fakeNode) Push(v *wire.View) {
	f.mu.Lock()
	f.view = v
	var subs []*fakewire.Conn
	for c := range f.subs {
		subs = append(subs, c)
	}
	f.mu.Unlock()
	for _, c := range subs {
		c.Send(wire.TypeViewChanged, 0, v)
	}
}

// SetSilently changes the view without pushing it (a lost push).
func (f *fakeNode) SetSilently(v *wire.View) {
	f.mu.Lock()
	f.view = v
	f.mu.Unlock()
}

func (f *fakeNode) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// upstreamVerifier is the verifier of the fake nodes' namespace
// "billing", secret "s3cret".
var upstreamVerifier = fakewire.MustVerifier("s3cret")

func (f *fakeNode) Hellos() []wire.ScramClientFirst {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.ScramClientFirst(nil), f.hellos...)
}

// Close stops the node and drops its connections, like a crash.
func (f *fakeNode) Close() { f.srv.Close() }

func makeView(version uint64, base uint16, masters ...uint32) *wire.View {
	v := &wire.View{Version: version}
	for g := range 15 {
		m := masters[g%len(masters)]
		v.Groups = append(v.Groups, wire.GroupView{Master: m, Addr: addrOf(base, m), Epoch: version})
	}
	for _, m := range masters {
		v.Nodes = append(v.Nodes, wire.NodeView{ID: m, Addr: addrOf(base, m), Alive: true})
	}
	return v
}

func addrOf(base uint16, id uint32) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(base)+int(id)))
}

// testClient speaks the wire protocol to the registry.
type testClient struct {
	t      *testing.T
	nc     net.Conn
	br     *bufio.Reader
	buf    []byte
	next   uint64
	pushes []*wire.View
}

func dialRegistry(t *testing.T, addr string) *testClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &testClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *testClient) send(typ wire.Type, m wire.Message) uint64 {
	c.t.Helper()
	c.next++
	b, err := wire.AppendFrame(nil, typ, c.next, m)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
	return c.next
}

// readFrame reads one frame and decodes it.
func (c *testClient) readFrame() (wire.Frame, wire.Message, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	f, nb, err := wire.ReadFrame(c.br, c.buf, 0)
	c.buf = nb
	if err != nil {
		return f, nil, err
	}
	m, err := wire.Decode(f.Type, f.Body)
	if err != nil {
		c.t.Fatalf("decode %s: %v", f.Type, err)
	}
	return f, m, nil
}

// call sends a request and returns its reply, recording pushes seen
// meanwhile.
func (c *testClient) call(typ wire.Type, m wire.Message) wire.Message {
	c.t.Helper()
	id := c.send(typ, m)
	for {
		f, msg, err := c.readFrame()
		if err != nil {
			c.t.Fatalf("waiting for the reply to %s: %v", typ, err)
		}
		if f.ReqID == id {
			return msg
		}
		if f.Type == wire.TypeViewChanged {
			c.pushes = append(c.pushes, msg.(*wire.View))
		}
	}
}

// testClientKey is the client key of the tests' Hellos.
const testClientKey = "registry-test-client-key"

// testSecret is every test namespace's secret at the registry.
const testSecret = "whatever"

// hello authenticates as a client of ns (SCRAM, with testSecret).
func (c *testClient) hello(ns string) *wire.Response {
	c.t.Helper()
	return c.helloWith(ns, testSecret)
}

func (c *testClient) helloWith(ns, secret string) *wire.Response {
	c.t.Helper()
	r, err := testutil.ScramHello(c.call, ns, secret, testClientKey)
	if err != nil {
		c.t.Fatalf("handshake: %v", err)
	}
	return r
}

func (c *testClient) getView() wire.Message { return c.call(wire.TypeGetView, &wire.GetView{}) }

// nextPush returns the next ViewChanged push.
func (c *testClient) nextPush() *wire.View {
	c.t.Helper()
	if len(c.pushes) > 0 {
		v := c.pushes[0]
		c.pushes = c.pushes[1:]
		return v
	}
	for {
		f, msg, err := c.readFrame()
		if err != nil {
			c.t.Fatalf("waiting for a push: %v", err)
		}
		if f.Type == wire.TypeViewChanged {
			return msg.(*wire.View)
		}
	}
}

func startRegistry(t *testing.T, clusters map[string][]string, namespaces map[string]string, mod func(*StandaloneConfig)) *Standalone {
	t.Helper()
	secrets := map[string]string{}
	for ns := range namespaces {
		secrets[ns] = testSecret
	}
	cfg := StandaloneConfig{
		Listen:            "127.0.0.1:0",
		Clusters:          clusters,
		Namespaces:        namespaces,
		Secrets:           secrets,
		DialTimeout:       time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RequestTimeout:    2 * time.Second,
		ReconnectMin:      20 * time.Millisecond,
		ReconnectMax:      200 * time.Millisecond,
		Logger:            testutil.FailureLogger(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewStandalone(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

func waitReady(t *testing.T, s *Standalone) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStandaloneServesEachNamespaceItsCluster(t *testing.T) {
	va := makeView(7, 7100, 1, 2, 3)
	vb := makeView(3, 8100, 11, 12, 13, 14, 15)
	a := newFakeNode(t, va)
	b := newFakeNode(t, vb)
	s := startRegistry(t,
		map[string][]string{"alpha": {a.Addr()}, "beta": {b.Addr()}},
		map[string]string{"orders": "alpha", "billing": "beta", "audit": "beta"},
		func(c *StandaloneConfig) {
			c.UpstreamAuth = map[string]UpstreamAuth{"beta": {Namespace: "billing", Secret: "s3cret"}}
		})
	waitReady(t, s)

	for _, tc := range []struct {
		ns   string
		want *wire.View
	}{{"orders", va}, {"billing", vb}, {"audit", vb}} {
		c := dialRegistry(t, s.Addr().String())
		r := c.hello(tc.ns)
		if r.Status != wire.StatusSuccess || r.ViewVersion != tc.want.Version {
			t.Fatalf("%s: Hello: %+v", tc.ns, r)
		}
		got, ok := c.getView().(*wire.View)
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s: GetView = %+v, want %+v", tc.ns, got, tc.want)
		}
		hb, ok := c.call(wire.TypeHeartbeat, &wire.Heartbeat{}).(*wire.Response)
		if !ok || hb.Status != wire.StatusSuccess || hb.ViewVersion != tc.want.Version {
			t.Fatalf("%s: Heartbeat: %+v", tc.ns, hb)
		}
	}
	if v, ok := s.View("alpha"); !ok || v.Version != 7 {
		t.Fatalf("View(alpha) = %v %v", v, ok)
	}
	if h := b.Hellos(); len(h) == 0 || h[0].Namespace != "billing" || h[0].ClientID == 0 {
		t.Fatalf("upstream hellos at beta: %+v", h)
	}
	if h := a.Hellos(); len(h) != 0 {
		t.Fatalf("upstream hello sent to alpha: %+v", h)
	}
	st := s.Status()
	if len(st) != 2 || st[0].Name != "alpha" || st[0].Upstream != a.Addr() || st[0].Version != 7 || !st[1].HasView {
		t.Fatalf("Status = %+v", st)
	}
}

func TestStandaloneRefusals(t *testing.T) {
	a := newFakeNode(t, makeView(1, 7100, 1, 2, 3))
	s := startRegistry(t, map[string][]string{"alpha": {a.Addr()}}, map[string]string{"orders": "alpha"}, nil)
	waitReady(t, s)

	c := dialRegistry(t, s.Addr().String())
	// Views need a Hello first.
	if r, ok := c.getView().(*wire.Response); !ok || r.Status != wire.StatusAuthFailed {
		t.Fatalf("GetView before Hello: %+v", r)
	}
	if r, ok := c.call(wire.TypeSubscribeView, &wire.SubscribeView{}).(*wire.Response); !ok || r.Status != wire.StatusAuthFailed {
		t.Fatalf("SubscribeView before Hello: %+v", r)
	}
	// Unknown namespace.
	if r := c.hello("payments"); r.Status != wire.StatusAuthFailed {
		t.Fatalf("unknown namespace: %+v", r)
	}
	// A wrong secret, a clear-secret Hello (protocol version 1) and an
	// invalid handshake (no client id) are AUTH_FAILED too.
	if r := c.helloWith("orders", "guess"); r.Status != wire.StatusAuthFailed {
		t.Fatalf("wrong secret: %+v", r)
	}
	if r, _ := c.call(wire.TypeHello, &wire.Hello{Namespace: "orders", Secret: testSecret, ClientID: wire.ClientIDOf(testClientKey), ClientKey: testClientKey}).(*wire.Response); r == nil || r.Status != wire.StatusAuthFailed {
		t.Fatalf("clear-secret Hello: %+v", r)
	}
	if r, _ := c.call(wire.TypeScramClientFirst, &wire.ScramClientFirst{Namespace: "orders", Mechanism: wire.MechanismSCRAMSHA256, Message: "n,,n=orders,r=abc"}).(*wire.Response); r == nil || r.Status != wire.StatusAuthFailed {
		t.Fatalf("invalid handshake: %+v", r)
	}
	if r := c.hello("orders"); r.Status != wire.StatusSuccess {
		t.Fatalf("Hello: %+v", r)
	}
	// Lock requests are refused, with a message saying why.
	for _, req := range []struct {
		typ wire.Type
		m   wire.Message
	}{
		{wire.TypeAcquire, &wire.Acquire{Key: "k", Owner: wire.Owner{Client: 42, ID: 1}, Weight: 1, TTLMs: 1000}},
		{wire.TypeRelease, &wire.Release{Key: "k", Owner: wire.Owner{Client: 42, ID: 1}, Token: 1}},
		{wire.TypeState, &wire.State{Key: "k"}},
	} {
		r, ok := c.call(req.typ, req.m).(*wire.Response)
		if !ok || r.Status != wire.StatusBadRequest || !strings.Contains(r.Msg, "registry") {
			t.Fatalf("%s: %+v", req.typ, r)
		}
	}
	// A reply type sent as a request: BAD_REQUEST, connection kept.
	if r, ok := c.call(wire.TypeResponse, &wire.Response{}).(*wire.Response); !ok || r.Status != wire.StatusBadRequest {
		t.Fatalf("reply type as request: %+v", r)
	}
	// An undecodable body: BAD_REQUEST, connection kept.
	c.next++
	bad := make([]byte, wire.HeaderSize+1)
	binary.BigEndian.PutUint32(bad, uint32(len(bad)-4))
	bad[4], bad[5] = wire.Version, byte(wire.TypeHello)
	binary.BigEndian.PutUint64(bad[6:], c.next)
	bad[wire.HeaderSize] = 0xc1 // never-used msgpack byte
	if _, err := c.nc.Write(bad); err != nil {
		t.Fatal(err)
	}
	if f, m, err := c.readFrame(); err != nil || f.ReqID != c.next || m.(*wire.Response).Status != wire.StatusBadRequest {
		t.Fatalf("undecodable body: %+v %+v %v", f, m, err)
	}
	if _, ok := c.getView().(*wire.View); !ok {
		t.Fatal("connection unusable after BAD_REQUEST")
	}
}

func TestStandaloneClosesBrokenFraming(t *testing.T) {
	a := newFakeNode(t, makeView(1, 7100, 1, 2, 3))
	s := startRegistry(t, map[string][]string{"alpha": {a.Addr()}}, map[string]string{"orders": "alpha"},
		func(c *StandaloneConfig) { c.MaxFrame = 4096 })
	waitReady(t, s)

	for name, frame := range map[string][]byte{
		"bad version": {0, 0, 0, 10, 9, byte(wire.TypeHello), 0, 0, 0, 0, 0, 0, 0, 1},
		"too large":   {0, 0, 0x10, 0, wire.Version, byte(wire.TypeHello), 0, 0, 0, 0, 0, 0, 0, 1},
		"too short":   {0, 0, 0, 2, wire.Version, byte(wire.TypeHello)},
	} {
		c := dialRegistry(t, s.Addr().String())
		if r := c.hello("orders"); r.Status != wire.StatusSuccess {
			t.Fatalf("%s: Hello: %+v", name, r)
		}
		if _, err := c.nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.readFrame()
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) && !isConnReset(err) {
			t.Fatalf("%s: connection not closed: %v", name, err)
		}
	}
}

func isConnReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func TestStandalonePushesClusterChanges(t *testing.T) {
	a := newFakeNode(t, makeView(5, 7100, 1, 2, 3))
	s := startRegistry(t, map[string][]string{"alpha": {a.Addr()}}, map[string]string{"orders": "alpha"}, nil)
	waitReady(t, s)

	c := dialRegistry(t, s.Addr().String())
	c.hello("orders")
	v, ok := c.call(wire.TypeSubscribeView, &wire.SubscribeView{}).(*wire.View)
	if !ok || v.Version != 5 {
		t.Fatalf("SubscribeView: %+v", v)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		return a.Subscribers() > 0
	}, "the registry's subscription at the node")

	// An older view is ignored; a newer one reaches the client.
	a.Push(makeView(4, 7100, 3, 2, 1))
	v6 := makeView(6, 7100, 2, 3, 1)
	a.Push(v6)
	if got := c.nextPush(); !reflect.DeepEqual(got, v6) {
		t.Fatalf("push = %+v, want %+v", got, v6)
	}
	// A push the registry missed is caught by its heartbeat's version.
	v9 := makeView(9, 7100, 3, 1, 2)
	a.SetSilently(v9)
	if got := c.nextPush(); !reflect.DeepEqual(got, v9) {
		t.Fatalf("push after a missed one = %+v, want %+v", got, v9)
	}
	// A client that did not subscribe gets no push but sees the view.
	c2 := dialRegistry(t, s.Addr().String())
	c2.hello("orders")
	if got, _ := c2.getView().(*wire.View); got == nil || got.Version != 9 {
		t.Fatalf("GetView = %+v", got)
	}
}

func TestStandaloneFallsBackToAnotherNode(t *testing.T) {
	// The first address refuses connections.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	n2 := newFakeNode(t, makeView(10, 7100, 1, 2, 3))
	n3 := newFakeNode(t, makeView(10, 7100, 1, 2, 3))
	s := startRegistry(t, map[string][]string{"alpha": {deadAddr, n2.Addr(), n3.Addr()}}, map[string]string{"orders": "alpha"}, nil)
	waitReady(t, s)
	c := dialRegistry(t, s.Addr().String())
	c.hello("orders")
	if v, ok := c.call(wire.TypeSubscribeView, &wire.SubscribeView{}).(*wire.View); !ok || v.Version != 10 {
		t.Fatalf("SubscribeView: %+v", v)
	}
	if up := s.Status()[0].Upstream; up != n2.Addr() {
		t.Fatalf("following %q, want %q", up, n2.Addr())
	}

	// The followed node crashes; the registry moves to the third and the
	// client, still subscribed, gets that node's newer view.
	v11 := makeView(11, 7100, 2, 3)
	n3.SetSilently(v11)
	n2.Close()
	if got := c.nextPush(); !reflect.DeepEqual(got, v11) {
		t.Fatalf("push after failover = %+v, want %+v", got, v11)
	}
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		st := s.Status()[0]
		return st.Upstream == n3.Addr(), st.Upstream
	}, "the registry to follow the third node")
}

func TestStandaloneNoViewYet(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	s := startRegistry(t, map[string][]string{"alpha": {deadAddr}}, map[string]string{"orders": "alpha"}, nil)
	c := dialRegistry(t, s.Addr().String())
	if r := c.hello("orders"); r.Status != wire.StatusSuccess || r.ViewVersion != 0 {
		t.Fatalf("Hello: %+v", r)
	}
	r, ok := c.getView().(*wire.Response)
	if !ok || r.Status != wire.StatusNoMaster || r.RetryAfterMs == 0 {
		t.Fatalf("GetView without a view: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady: %v", err)
	}
}

func TestStandaloneConfigErrors(t *testing.T) {
	ok := StandaloneConfig{Listen: "127.0.0.1:0", Clusters: map[string][]string{"a": {"127.0.0.1:1"}}, Namespaces: map[string]string{"ns": "a"}, Secrets: map[string]string{"ns": "x"}}
	if _, err := NewStandalone(ok); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*StandaloneConfig){
		"no listen":        func(c *StandaloneConfig) { c.Listen = "" },
		"no clusters":      func(c *StandaloneConfig) { c.Clusters = nil },
		"empty cluster":    func(c *StandaloneConfig) { c.Clusters = map[string][]string{"a": nil} },
		"bad node address": func(c *StandaloneConfig) { c.Clusters = map[string][]string{"a": {"nope"}} },
		"unknown cluster":  func(c *StandaloneConfig) { c.Namespaces = map[string]string{"ns": "b"} },
		"bad namespace":    func(c *StandaloneConfig) { c.Namespaces = map[string]string{"n s": "a"} },
		"auth for nothing": func(c *StandaloneConfig) { c.UpstreamAuth = map[string]UpstreamAuth{"b": {Namespace: "ns"}} },
		"no secret":        func(c *StandaloneConfig) { c.Secrets = nil },
		"stray secret":     func(c *StandaloneConfig) { c.Secrets = map[string]string{"ns": "x", "other": "y"} },
	} {
		cfg := ok
		cfg.Clusters = map[string][]string{"a": {"127.0.0.1:1"}}
		cfg.Namespaces = map[string]string{"ns": "a"}
		mod(&cfg)
		if _, err := NewStandalone(cfg); err == nil {
			t.Errorf("%s: NewStandalone succeeded", name)
		}
	}
}
