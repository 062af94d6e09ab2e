package server

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestClientListeners: with either client_listener the plain client port
// serves the protocol (gnet runs only with "gnet"): the client locks and
// unlocks on several groups' masters, the view names the plain client
// addresses, and idle connections are closed (without gnet, the sweep
// runs without gnet's tick).
func TestClientListeners(t *testing.T) {
	t.Parallel()
	for _, l := range []string{ListenerNetpoll, ListenerGnet} {
		t.Run(l, func(t *testing.T) { testClientListener(t, l) })
	}
}

func testClientListener(t *testing.T, listener string) {
	const idle = 2 * time.Second
	tc := startClusterWith(t, 3, func(c *Config) {
		c.ClientListener = listener
		c.IdleTimeout = Duration(idle)
	})
	for _, s := range tc.nodes {
		if s.running.Load() != (listener == ListenerGnet) {
			t.Fatalf("client_listener %s: gnet engine running = %v", listener, s.running.Load())
		}
	}
	ctx := ctxT(t)
	c := newClient(t, tc)
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} { // several groups, so several masters
		m := c.Mutex(key)
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("Lock %s: %v", key, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %s: %v", key, err)
		}
	}

	rc := dialRaw(t, tc.cfgs[0].Nodes[0].Client)
	if r := rc.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	v, ok := rc.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View)
	if !ok || v.Nodes[1].Addr != tc.cfgs[0].Nodes[1].Client {
		t.Fatalf("view on the netpoll port: %+v", v)
	}
	// Silent past the idle timeout: the node closes the connection.
	start := time.Now()
	for {
		_, _, err := rc.read() // 30 s deadline
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "connection reset")) {
			break
		}
		if err != nil {
			t.Fatalf("idle connection not closed: %v", err)
		}
	}
	if el := time.Since(start); el < idle/2 {
		t.Fatalf("closed after %v, before the idle timeout %v", el, idle)
	}
}

// TestClientListenerChecked: client_listener names gnet or netpoll; the
// defaults are netpoll and an instance window of 4, the settings that
// measured best (bench/results/history/2026-11-24.md, 9e782a0, a 2-core AMD
// EPYC VM).
func TestClientListenerChecked(t *testing.T) {
	t.Parallel()
	c := Config{NodeID: 1, DataDir: "d", Nodes: []NodeAddr{{ID: 1, Peer: "127.0.0.1:1", Client: "127.0.0.1:2"}}, ClientListener: "epoll"}
	c.EnsureDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "client_listener") {
		t.Fatalf("Validate with client_listener epoll: %v", err)
	}
	for _, l := range []string{"", ListenerGnet, ListenerNetpoll} {
		c.ClientListener = l
		c.EnsureDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate with client_listener %q: %v", l, err)
		}
	}
	c.ClientListener = ""
	if c.EnsureDefaults(); c.ClientListener != ListenerNetpoll {
		t.Fatalf("default client_listener %q, want %q", c.ClientListener, ListenerNetpoll)
	}
	if c.InstanceWindow != 4 {
		t.Fatalf("default instance_window %d, want 4", c.InstanceWindow)
	}
}
