package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/internal/testutil"
)

// startSecureCluster starts n nodes with peer mTLS (development
// certificates for 127.0.0.1) and a TLS client listener each, and returns
// the cluster and the certificates' directory.
func startSecureCluster(t testing.TB, n int, tune ...func(*Config)) (*testCluster, string) {
	t.Helper()
	dir := t.TempDir()
	if _, err := pki.WriteDev(dir, pki.DevOptions{Cluster: "paxlock", Nodes: n, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	tlsPorts := freePorts(t, n)
	tc := startClusterWith(t, n, func(c *Config) {
		// c.Nodes is shared by every node's Config, and nodes already
		// started read it: give this node a copy with every node's TLS
		// client address.
		c.Nodes = slices.Clone(c.Nodes)
		for i := range c.Nodes {
			c.Nodes[i].ClientTLS = tlsPorts[i]
		}
		c.TLS = &pki.Files{CA: filepath.Join(dir, pki.DevCACert), Cert: filepath.Join(dir, pki.DevNodeCert(int(c.NodeID))), Key: filepath.Join(dir, pki.DevNodeKey(int(c.NodeID)))}
		for _, f := range tune {
			f(c)
		}
	})
	return tc, dir
}

// clientTLS is a client TLS configuration trusting the development CA.
func clientTLS(t testing.TB, dir string) *tls.Config {
	t.Helper()
	pool, err := pki.LoadCAPool(filepath.Join(dir, pki.DevCACert))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// dialRawTLS is dialRaw over TLS with conf.
func dialRawTLS(t *testing.T, addr string, conf *tls.Config) *rawConn {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: conf}
	return dialRawWith(t, addr, func(addr string) (net.Conn, error) {
		return d.DialContext(context.Background(), "tcp", addr)
	})
}

// TestClientTLSListener: a client with client.Config.TLS locks and
// unlocks through the nodes' TLS client listeners (and is served views
// naming them, so it never leaves TLS), while a plain client keeps using
// the gnet listener; a client that does not trust the nodes' CA does not
// connect.
func TestClientTLSListener(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 3)
	var tlsAddrs []string
	for _, n := range tc.cfgs[0].Nodes {
		tlsAddrs = append(tlsAddrs, n.ClientTLS)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The view served over TLS names the TLS addresses.
	rc := dialRawTLS(t, tlsAddrs[0], clientTLS(t, dir))
	if r := rc.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello over TLS: %+v", r)
	}
	if v, ok := rc.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View); !ok || v.Nodes[1].Addr != tlsAddrs[1] || v.Groups[0].Addr == tc.cfgs[0].Nodes[0].Client {
		t.Fatalf("view over TLS: %+v", v)
	}

	for name, cfg := range map[string]client.Config{
		"tls":   {Registry: tlsAddrs, TLS: clientTLS(t, dir)},
		"plain": {Registry: tc.clientAddrs()},
	} {
		cfg.Namespace, cfg.Secret, cfg.Logger, cfg.MaxRetries = "ns", "s3cret", testLogger(), testMaxRetries
		c, err := client.New(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: New: %v", name, err)
		}
		for _, key := range []string{"a", "b", "c", "d", "e"} { // several groups, so several masters
			m := c.Mutex(name + "-" + key)
			if err := m.Lock(ctx); err != nil {
				t.Fatalf("%s: Lock %s: %v", name, key, err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock %s: %v", name, key, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatalf("%s: Close: %v", name, err)
		}
	}

	// A client that does not trust the CA gets no session.
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if c, err := client.New(short, client.Config{Registry: tlsAddrs[:1], Namespace: "ns", Secret: "s3cret", Logger: testLogger(),
		TLS: &tls.Config{MinVersion: tls.VersionTLS12}}); err == nil {
		_ = c.Close()
		t.Fatal("a client that does not trust the nodes' CA connected")
	}
}

// TestRelayUnderMTLS: with peer TLS, a node relays a client's requests
// to the master over the master's TLS client listener with its own
// certificate, and the master serves them; a relay's Hello is refused on
// the plain listener, on the TLS listener without a certificate, and
// from a certificate of another node than the one it names.
func TestRelayUnderMTLS(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 3)
	const key = "relayed-tls"
	mi := tc.masterIndex("ns", key)
	via := tc.nodes[(mi+1)%3]
	a := dialRaw(t, via.cfg.self().Client)
	if r := a.hello("ns", "s3cret", 8); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	owner := wire.Owner{Client: cid(8), ID: 1}
	r := a.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: owner, Weight: 1, TTLMs: 10000, Redirects: wire.ForwardNow})
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("acquire through the relay: %+v", r)
	}
	if st := tc.masterConn("ns", key, 99).callMaster(wire.TypeState, &wire.State{Key: key}); st.Holder != owner || st.Token != r.Token {
		t.Fatalf("the master's state after a relayed acquire: %+v", st)
	}
	if rr := a.call(wire.TypeRelease, &wire.Release{Key: key, Owner: owner, Token: r.Token, Redirects: wire.ForwardNow}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release through the relay: %+v", rr)
	}
	if n := via.stats.relays.Load(); n == 0 {
		t.Fatal("no relay was opened")
	}

	master := tc.cfgs[mi].self()
	relayHello := func(from uint32) *wire.Hello {
		return &wire.Hello{Namespace: "ns", ClientID: cid(10), ClientKey: testKey(10), Via: from}
	}
	viaID := via.cfg.NodeID
	// Plain listener: anyone could send it.
	if r := dialRaw(t, master.Client).call(wire.TypeHello, relayHello(viaID)); r.Status != wire.StatusAuthFailed {
		t.Fatalf("relay Hello on the plain listener: %+v", r)
	}
	// TLS listener, no client certificate.
	if r := dialRawTLS(t, master.ClientTLS, clientTLS(t, dir)).call(wire.TypeHello, relayHello(viaID)); r.Status != wire.StatusAuthFailed {
		t.Fatalf("relay Hello without a certificate: %+v", r)
	}
	// TLS listener, node via's certificate, claiming to be another node.
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.DevNodeCert(int(viaID))), filepath.Join(dir, pki.DevNodeKey(int(viaID))))
	if err != nil {
		t.Fatal(err)
	}
	withCert := clientTLS(t, dir)
	withCert.Certificates = []tls.Certificate{cert}
	other := tc.cfgs[(mi+2)%3].NodeID
	if r := dialRawTLS(t, master.ClientTLS, withCert).call(wire.TypeHello, relayHello(other)); r.Status != wire.StatusAuthFailed {
		t.Fatalf("relay Hello naming node %d with node %d's certificate: %+v", other, viaID, r)
	}
	// And as itself it is accepted.
	if r := dialRawTLS(t, master.ClientTLS, withCert).call(wire.TypeHello, relayHello(viaID)); r.Status != wire.StatusSuccess {
		t.Fatalf("relay Hello with its own certificate: %+v", r)
	}
	// The relay secret proves nothing where node certificates do (the
	// test clusters have one): a relay's SCRAM exchange is refused.
	if r, err := testutil.ScramHelloVia(dialRaw(t, master.Client).callAny, "ns", testRelaySecret, testKey(10), viaID); err != nil || r.Status != wire.StatusAuthFailed {
		t.Fatalf("a relay's SCRAM exchange with peer TLS on: %+v, %v; want AUTH_FAILED", r, err)
	}
}

// TestHandshakeReplayRefused records the bytes a real client sends in
// its SCRAM handshake with a node and replays them on a fresh
// connection: the server's new nonce makes the recorded proof worthless,
// and the recording holds neither the secret nor anything derived from
// it alone.
func TestHandshakeReplayRefused(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	addr := tc.cfgs[0].self().Client
	const secret = "s3cret"
	rec := &recorder{}
	c, err := client.New(context.Background(), client.Config{Registry: []string{addr}, Namespace: "ns", Secret: secret, Logger: testLogger(),
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return rec.wrap(nc), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := rec.sent()
	if len(sent) == 0 {
		t.Fatal("nothing recorded")
	}
	if bytes.Contains(sent, []byte(secret)) {
		t.Fatal("the handshake carries the secret")
	}
	// Split the recording into frames: the handshake's requests are the
	// first two (ScramClientFirst, ScramClientFinal).
	var frames [][]byte
	for b := sent; len(b) > 0; {
		f, n, err := wire.ParseFrame(b, 0)
		if err != nil || n == 0 {
			t.Fatalf("recorded bytes: %v", err)
		}
		if f.Type == wire.TypeScramClientFirst || f.Type == wire.TypeScramClientFinal {
			frames = append(frames, b[:n])
		}
		b = b[n:]
	}
	if len(frames) != 2 {
		t.Fatalf("recorded %d handshake frames, want 2", len(frames))
	}
	replay := dialRaw(t, addr)
	for i, fr := range frames {
		if _, err := replay.c.Write(fr); err != nil {
			t.Fatal(err)
		}
		f, m, err := replay.read()
		if err != nil {
			t.Fatalf("reply to replayed frame %d: %v", i, err)
		}
		if i == 0 && f.Type != wire.TypeScramServerFirst {
			t.Fatalf("reply to the replayed first message: %s %+v", f.Type, m)
		}
		if i == 1 {
			if r, ok := m.(*wire.Response); !ok || r.Status != wire.StatusAuthFailed {
				t.Fatalf("reply to the replayed proof: %s %+v, want AUTH_FAILED", f.Type, m)
			}
		}
	}
	// The replaying connection is not authenticated.
	if r := replay.call(wire.TypeState, &wire.State{Key: "k"}); r.Status != wire.StatusAuthFailed {
		t.Fatalf("request after a replayed handshake: %+v", r)
	}
}

// recorder records what is written on the first connection it wraps.
type recorder struct {
	mu    sync.Mutex
	taken bool
	buf   []byte
}

func (r *recorder) wrap(nc net.Conn) net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken {
		return nc
	}
	r.taken = true
	return &recordingConn{Conn: nc, r: r}
}

func (r *recorder) sent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.buf...)
}

type recordingConn struct {
	net.Conn
	r *recorder
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.r.mu.Lock()
	c.r.buf = append(c.r.buf, b...)
	c.r.mu.Unlock()
	return c.Conn.Write(b)
}

// TestTLSSessionRevoked: a session on the TLS client listener is revoked
// like one on the plain listener when its namespace's secret changes (a
// holder gets Lost with EventRevoked, then the connection closes), and the
// old secret is refused there from then on.
func TestTLSSessionRevoked(t *testing.T) {
	t.Parallel()
	tc, dir := startSecureCluster(t, 3)
	tc.changeNamespace("tenant", "old")
	const key = "revoked-tls"
	mi := tc.masterIndex("tenant", key)
	addr := tc.cfgs[mi].self().ClientTLS
	holder := dialRawTLS(t, addr, clientTLS(t, dir))
	if r := holder.hello("tenant", "old", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	if r := holder.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1, TTLMs: 60000}); r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	tc.changeNamespace("tenant", "new")
	lost := false
	for _, m := range holder.ended("TLS session with the old secret") {
		if l, ok := m.(*wire.Lost); ok && l.Key == key && l.Event == wire.EventRevoked {
			lost = true
		}
	}
	if !lost {
		t.Fatal("the holder got no Lost with EventRevoked")
	}
	rc := dialRawTLS(t, addr, clientTLS(t, dir))
	if r := rc.hello("tenant", "old", 2); r.Status != wire.StatusAuthFailed {
		t.Fatalf("old secret over TLS: %+v", r)
	}
	if r := rc.hello("tenant", "new", 2); r.Status != wire.StatusSuccess {
		t.Fatalf("new secret over TLS: %+v", r)
	}
}
