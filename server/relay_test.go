package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
)

// waitBalanced waits until every node masters its even share of the 15
// groups: placement has settled, and moves no master until the cluster
// changes.
//
// Settling takes every group's hand-off to its preferred node, each
// started again by a lease that lapses on the way; on a loaded machine
// (two busy loops beside six 3-node clusters under -race) it took longer
// than 30 s, so the wait is bounded by balanceTimeout, and a wait past
// 10 s is logged with how long it took.
func (tc *testCluster) waitBalanced() {
	tc.t.Helper()
	per := 15 / len(tc.nodes)
	start := time.Now()
	testutil.EventuallyWith(tc.t, balanceTimeout, func() (bool, string) {
		counts := make([]int, len(tc.nodes))
		ok := true
		for i, s := range tc.nodes {
			counts[i] = countServing(s)
			ok = ok && counts[i] == per
		}
		return ok, fmt.Sprintf("groups served per node %v, want %d each", counts, per)
	}, "balanced placement")
	if took := time.Since(start); took > 10*time.Second {
		tc.t.Logf("placement took %v to settle", took.Round(time.Millisecond))
	}
}

// balanceTimeout bounds waitBalanced.
const balanceTimeout = 90 * time.Second

// masterIndex returns the index of the node serving key's group, after
// waiting for placement to settle (so the master stays put) and for every
// node to know that master (so the others redirect to it rather than
// answer NO_MASTER).
func (tc *testCluster) masterIndex(ns, key string) int {
	tc.t.Helper()
	tc.waitBalanced()
	g := wire.GroupOf(wire.KeyHash(ns, key), 15)
	for i, s := range tc.nodes {
		if s.svc.Group(group.ID(g)).Serving() {
			waitFor(tc.t, "every node knows the master", func() bool {
				for _, o := range tc.nodes {
					if uint32(o.svc.Group(group.ID(g)).Consensus().Status().Master) != s.cfg.NodeID {
						return false
					}
				}
				return true
			})
			return i
		}
	}
	tc.t.Fatalf("no master for %q", key)
	return -1
}

// TestServerForwardsAfterRedirectBudget speaks the protocol by hand to a
// node that is not the key's master: it redirects until the request has
// used up the budget (2 redirects) or asks for forwarding (ForwardNow),
// then forwards it, and relays replies and pushes back; a request that
// came through a relay is never forwarded again; a broken relay closes its
// client connection.
func TestServerForwardsAfterRedirectBudget(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	const key = "relayed"
	mi := tc.masterIndex("ns", key)
	via := tc.nodes[(mi+1)%3]
	a := dialRaw(t, via.cfg.self().Client)
	if r := a.hello("ns", "s3cret", 8); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	acq := func(redirects uint8) *wire.Acquire {
		return &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(8), ID: 1}, Weight: 1, TTLMs: 10000, Redirects: redirects}
	}
	for _, n := range []uint8{0, 1} {
		if r := a.call(wire.TypeAcquire, acq(n)); r.Status != wire.StatusMasterRedirect || r.Redirect != tc.cfgs[mi].self().Client {
			t.Fatalf("redirects=%d: %+v, want a redirect to %s", n, r, tc.cfgs[mi].self().Client)
		}
	}
	r := a.call(wire.TypeAcquire, acq(2))
	if r.Status != wire.StatusSuccess || r.Token == 0 {
		t.Fatalf("redirects=2: %+v, want the master's grant through the relay", r)
	}
	tok := r.Token
	if st := tc.masterConn("ns", key, 99).callMaster(wire.TypeState, &wire.State{Key: key}); st.Status != wire.StatusSuccess || st.Holder != (wire.Owner{Client: cid(8), ID: 1}) || st.Token != tok {
		t.Fatalf("the master's state after a forwarded acquire: %+v", st)
	}
	if n := via.stats.forwarded.Load(); n != 1 {
		t.Fatalf("forwarded counter %d, want 1", n)
	}

	// A blocking acquire through the relay is woken by the Granted push,
	// relayed; so is a watch's event.
	b := dialRaw(t, via.cfg.self().Client)
	b.hello("ns", "s3cret", 9)
	if w := b.call(wire.TypeWatch, &wire.Watch{Key: key, WatchID: 5, Token: tok, Redirects: wire.ForwardNow}); w.Status != wire.StatusSuccess {
		t.Fatalf("watch through the relay: %+v", w)
	}
	w := b.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(9), ID: 1}, Weight: 1, TTLMs: 10000,
		MaxWaitMs: wire.WaitForever, WaitID: 77, Redirects: wire.ForwardNow})
	if w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire through the relay: %+v", w)
	}
	if rr := a.call(wire.TypeRelease, &wire.Release{Key: key, Owner: wire.Owner{Client: cid(8), ID: 1}, Token: tok, Redirects: wire.ForwardNow}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release through the relay: %+v", rr)
	}
	var granted *wire.Granted
	var event *wire.WatchEvent
	for granted == nil || event == nil {
		f, m, err := b.read()
		if err != nil {
			t.Fatalf("waiting for the relayed pushes: %v", err)
		}
		if f.ReqID != 0 {
			continue
		}
		switch p := m.(type) {
		case *wire.Granted:
			granted = p
		case *wire.WatchEvent:
			event = p
		}
	}
	if granted.WaitID != 77 || granted.Status != wire.StatusSuccess || granted.Token <= tok {
		t.Fatalf("relayed grant: %+v (released token %d)", granted, tok)
	}
	if event.WatchID != 5 || event.Token < tok {
		t.Fatalf("relayed watch event: %+v", event)
	}

	// A request that came through another node's relay is redirected, not
	// forwarded again.
	relayed := dialRaw(t, via.cfg.self().Client)
	other := tc.cfgs[(mi+2)%3].NodeID // a node of the cluster, neither via nor the master
	if r, err := testutil.ScramHelloVia(relayed.callAny, "ns", testRelaySecret, testKey(10), other); err != nil || r.Status != wire.StatusSuccess {
		t.Fatalf("a relay's handshake as node %d: %+v, %v", other, r, err)
	}
	// A node that masters the group answers itself: a lease that lapsed
	// on a loaded machine may have moved the group to via since
	// masterIndex. That answer is no forward, as via's count shows.
	g := group.ID(wire.GroupOf(wire.KeyHash("ns", key), 15))
	before := via.stats.forwarded.Load()
	r = relayed.call(wire.TypeState, &wire.State{Key: key, Redirects: wire.ForwardNow})
	switch forwarded := via.stats.forwarded.Load() - before; {
	case r.Status == wire.StatusMasterRedirect && forwarded == 0:
	case r.Status == wire.StatusSuccess && forwarded == 0 && via.svc.Group(g).Serving():
		t.Logf("node %d masters %q meanwhile: it answered the relayed request itself", via.cfg.NodeID, key)
	default:
		t.Fatalf("a relayed request was forwarded again: %+v (%d forwarded by node %d)", r, forwarded, via.cfg.NodeID)
	}

	// Stopping the master breaks the relay: its client connection is
	// closed, so the client re-sends what it had registered there.
	tc.stop(mi)
	for {
		if _, _, err := b.read(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("client connection of a broken relay stayed open")
			}
			break
		}
	}
}

// TestClientRelaysWhenMasterUnreachable runs a client that cannot connect
// to one node (its dialer refuses that address): requests for the groups
// that node masters go through another node, which forwards them. Try-lock,
// a blocking lock woken by a relayed push, unlock, state and a watch all
// work as they would directly.
//
// The nodes close connections idle for 2 s, and the blocked lock waits
// longer than that: the relay's own heartbeats keep it open (one relay
// is opened in all).
func TestClientRelaysWhenMasterUnreachable(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	tc := startClusterWith(t, 3, func(c *Config) { c.IdleTimeout = Duration(idle) })
	const key = "behind-a-wall"
	mi := tc.masterIndex("ns", key)
	blocked := tc.cfgs[mi].self().Client
	d := &net.Dialer{}
	ctx := ctxT(t)
	walled, err := client.New(ctx, client.Config{
		Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(),
		HeartbeatInterval: idle / 4,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			if addr == blocked {
				return nil, errors.New("test: no route to " + addr)
			}
			return d.DialContext(ctx, "tcp", addr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer walled.Close()
	free, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret",
		Logger: testLogger(), HeartbeatInterval: idle / 4})
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()

	m := walled.Mutex(key, client.TTL(10*time.Second))
	if err := m.TryLock(ctx); err != nil {
		t.Fatalf("try-lock through a relay: %v", err)
	}
	st, err := free.State(ctx, key)
	if err != nil || !st.Held || st.Holder.Client != walled.ID() || st.Token != m.Token() {
		t.Fatalf("state seen directly: %+v %v (token %d)", st, err, m.Token())
	}
	watch, err := walled.Watch(ctx, key, m.Token())
	if err != nil {
		t.Fatalf("watch through a relay: %v", err)
	}
	defer watch.Close()
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("unlock through a relay: %v", err)
	}

	// The directly connected client takes the lock; the walled one blocks
	// and is woken by the Granted push its relay carries back.
	other := free.Mutex(key, client.TTL(10*time.Second))
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	blockedLock := walled.Mutex(key, client.TTL(10*time.Second))
	go func() { got <- blockedLock.Lock(ctx) }()
	waitFor(t, "the walled client queued", func() bool {
		st, err := free.State(ctx, key)
		return err == nil && st.QueueLen == 1
	})
	// Outlast the master's idle timeout with only the wait on the relay.
	// A connection to the master opened now that sends nothing is closed
	// idle once a sweep finds it silent for longer than idle; the relay's
	// connection, silent but for its heartbeats since the wait queued, is
	// swept by then too unless they keep it open (relays, below).
	probe := dialRaw(t, blocked)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		_, _ = probe.c.Read(make([]byte, 1)) // returns once the master closes it
	}()
	select {
	case <-swept:
	case <-ctx.Done():
		t.Fatal("the master did not close an idle connection")
	}
	before := other.Token()
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("blocking lock through a relay: %v", err)
	}
	if blockedLock.Token() <= before {
		t.Fatalf("token %d after %d", blockedLock.Token(), before)
	}
	select {
	case ev := <-watch.Events():
		if ev.Token <= m.Token() {
			t.Fatalf("watch event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no watch event through the relay")
	}
	if err := blockedLock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var forwarded uint64
	for _, s := range tc.nodes {
		forwarded += s.stats.forwarded.Load()
	}
	if forwarded == 0 {
		t.Fatal("no node forwarded anything: the test did not exercise the relay")
	}
	var relays uint64
	for _, s := range tc.nodes {
		relays += s.stats.relays.Load()
	}
	if relays != 1 {
		t.Fatalf("%d relays opened, want 1: an idle relay was closed", relays)
	}
}

// TestRelayHelloRefusedWithoutPeerTLS: on a cluster whose peers run
// without TLS, a relay's Hello (Via set, no secret) proves nothing about
// who sends it, so every node refuses it AUTH_FAILED, whichever node and
// namespace it names, and the connection stays unauthenticated.
func TestRelayHelloRefusedWithoutPeerTLS(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	for i, cfg := range tc.cfgs {
		for _, ns := range []string{"ns", "other"} {
			rc := dialRaw(t, cfg.self().Client)
			via := tc.cfgs[(i+1)%len(tc.cfgs)].NodeID
			r := rc.call(wire.TypeHello, &wire.Hello{Namespace: ns, ClientID: cid(10), ClientKey: testKey(10), Agent: "intruder", Via: via})
			if r.Status != wire.StatusAuthFailed {
				t.Fatalf("node %d: a relay Hello for %q claiming node %d from a plain client: %+v, want AUTH_FAILED", cfg.NodeID, ns, via, r)
			}
			st := rc.call(wire.TypeState, &wire.State{Key: "k"})
			if st.Status != wire.StatusAuthFailed {
				t.Fatalf("node %d: a request after the refused relay Hello: %+v, want AUTH_FAILED", cfg.NodeID, st)
			}
		}
	}
}

// TestRelaySecretProved: without peer TLS a relay proves the cluster's
// relay secret with SCRAM (ScramClientFirst with Via). A wrong secret,
// the namespace's own secret, a node id that is no member, an unknown
// namespace and a client's exchange with the relay secret are all
// refused AUTH_FAILED; the right secret opens a relay's session, whose
// requests are served as its client's and never forwarded again.
func TestRelaySecretProved(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	const key = "relay-secret"
	mi := tc.masterIndex("ns", key)
	addr := tc.cfgs[mi].self().Client
	via := tc.cfgs[(mi+1)%3].NodeID
	for _, c := range []struct {
		what, ns, secret string
		via              uint32
	}{
		{"a wrong secret", "ns", "not-the-relay-secret", via},
		{"the namespace's secret", "ns", "s3cret", via},
		{"a node that is no member", "ns", testRelaySecret, 99},
		{"an unknown namespace", "nope", testRelaySecret, via},
		{"the relay secret without Via", "ns", testRelaySecret, 0},
	} {
		rc := dialRaw(t, addr)
		r, err := testutil.ScramHelloVia(rc.callAny, c.ns, c.secret, testKey(11), c.via)
		if err != nil || r.Status != wire.StatusAuthFailed {
			t.Fatalf("%s: %+v, %v; want AUTH_FAILED", c.what, r, err)
		}
		if st := rc.call(wire.TypeState, &wire.State{Key: key}); st.Status != wire.StatusAuthFailed {
			t.Fatalf("%s: a request after the refusal: %+v, want AUTH_FAILED", c.what, st)
		}
	}
	rc := dialRaw(t, addr)
	if r, err := testutil.ScramHelloVia(rc.callAny, "ns", testRelaySecret, testKey(11), via); err != nil || r.Status != wire.StatusSuccess {
		t.Fatalf("the relay secret: %+v, %v", r, err)
	}
	o := wire.Owner{Client: cid(11), ID: 1}
	if r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: o, Weight: 1, TTLMs: 10000}); r.Status != wire.StatusSuccess {
		t.Fatalf("acquire as the relayed client: %+v", r)
	}
	if r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(12), ID: 1}, Weight: 1, TTLMs: 10000}); r.Status != wire.StatusAuthFailed {
		t.Fatalf("acquire for another client on the relay's session: %+v, want AUTH_FAILED", r)
	}
	other := dialRaw(t, tc.cfgs[via-1].self().Client)
	if r, err := testutil.ScramHelloVia(other.callAny, "ns", testRelaySecret, testKey(11), tc.cfgs[mi].NodeID); err != nil || r.Status != wire.StatusSuccess {
		t.Fatalf("the relay secret at another node: %+v, %v", r, err)
	}
	if r := other.call(wire.TypeState, &wire.State{Key: key, Redirects: wire.ForwardNow}); r.Status != wire.StatusMasterRedirect {
		t.Fatalf("a relay's request at a node that does not master the key: %+v, want MASTER_REDIRECT (never forwarded again)", r)
	}
}

// TestNoRelaysWithoutPeerTLSOrSecret: nodes whose peers run without TLS
// and that have no relay secret have nothing a relay could prove: they
// refuse a relay's exchange whatever its secret, and a node that does not
// master a key redirects a request for it even when the client asks it to
// forward (ForwardNow), instead of relaying it. A client that reaches the
// masters works as before.
func TestNoRelaysWithoutPeerTLSOrSecret(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 3, func(c *Config) { c.RelaySecretFile = "" })
	const key = "no-relays"
	mi := tc.masterIndex("ns", key)
	other := tc.cfgs[(mi+1)%3]
	rc := dialRaw(t, other.self().Client)
	for _, secret := range []string{testRelaySecret, ""} {
		r, err := testutil.ScramHelloVia(rc.callAny, "ns", secret, testKey(12), tc.cfgs[mi].NodeID)
		if err != nil || r.Status != wire.StatusAuthFailed {
			t.Fatalf("a relay's exchange with %q and no relay secret configured: %+v, %v; want AUTH_FAILED", secret, r, err)
		}
	}
	rc.hello("ns", "s3cret", 12)
	r := rc.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(12), ID: 1}, Weight: 1, TTLMs: 10000, Redirects: wire.ForwardNow})
	if r.Status != wire.StatusMasterRedirect || r.Redirect != tc.cfgs[mi].self().Client {
		t.Fatalf("ForwardNow at a node that cannot relay: %+v, want a redirect to %s", r, tc.cfgs[mi].self().Client)
	}
	if n := tc.nodes[(mi+1)%3].stats.forwarded.Load(); n != 0 {
		t.Fatalf("%d requests forwarded by a node without relays", n)
	}
	c := newClient(t, tc)
	ctx := ctxT(t)
	m := c.Mutex(key)
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
