package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/testutil"
)

// readGate holds back what a client's connections read while it is shut,
// so that a test can keep a Granted push from reaching the client until it
// has cancelled the wait or started Close.
type readGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while reads pass
}

func newReadGate() *readGate {
	g := &readGate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *readGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *readGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *readGate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

type gatedConn struct {
	net.Conn
	g *readGate
}

// Read returns what arrived only once the gate is open: a read already
// blocked in the kernel when the gate shuts is held back too.
func (c gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.g.wait()
	return n, err
}

// newGatedClient is a client whose reads pass through g. Its heartbeats are
// slow, so that a shut gate does not look like a dead node.
func newGatedClient(t *testing.T, tc *testCluster, g *readGate) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := client.New(ctx, client.Config{
		Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(),
		HeartbeatInterval: time.Minute, HeartbeatTimeout: time.Minute,
		RequestTimeout: 10 * time.Second, CloseTimeout: 20 * time.Second,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return gatedConn{Conn: nc, g: g}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.release(); c.Close() })
	return c
}

// TestCloseGivesBackRacedGrants: a blocking Lock whose grant is on its way
// when its context ends, or when the client closes, leaves the key free —
// at Close at the latest, not after the lock's TTL (30 s here).
func TestCloseGivesBackRacedGrants(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	other := newClient(t, tc)
	ctx := ctxT(t)

	// race sets up key held by other, a Lock of key by a gated client
	// queued behind it, then grants it while the gate holds back the push.
	race := func(t *testing.T, key string) (*client.Client, *readGate, context.CancelFunc, chan error) {
		holder := other.Mutex(key, client.TTL(30*time.Second))
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		g := newReadGate()
		c := newGatedClient(t, tc, g)
		lctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		waiter := c.Mutex(key, client.TTL(30*time.Second))
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(lctx) }()
		waitFor(t, "the lock queued", func() bool {
			st, err := other.State(ctx, key)
			return err == nil && st.QueueLen == 1
		})
		g.shut()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The grant is applied: the server says the waiter holds the key.
		waitFor(t, "the grant applied", func() bool {
			st, err := other.State(ctx, key)
			return err == nil && st.Held && st.Holder == waiter.Owner()
		})
		return c, g, cancel, got
	}
	free := func(t *testing.T, key string) bool {
		st, err := other.State(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return !st.Held
	}
	// closing starts c.Close, waits until it has ended the caller's calls
	// (so that the held-back push cannot complete the Lock any more),
	// opens the gate and returns when Close has.
	closing := func(t *testing.T, c *client.Client, g *readGate) {
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		waitFor(t, "Close to start", func() bool {
			// Unlock of a fresh handle sends nothing: ErrNotHeld, or ErrClosed.
			return errors.Is(c.Mutex("probe").Unlock(ctx), client.ErrClosed)
		})
		g.release()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatal("Close did not return")
		}
	}

	t.Run("cancelled, then closed", func(t *testing.T) {
		c, g, cancel, got := race(t, "raced-cancel")
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: %v, want context.Canceled", err)
		}
		closing(t, c, g)
		if !free(t, "raced-cancel") {
			t.Fatal("the raced grant is still held after Close")
		}
	})

	t.Run("blocked when closed", func(t *testing.T) {
		c, g, _, got := race(t, "raced-close")
		closing(t, c, g)
		if err := <-got; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Lock: %v, want ErrClosed", err)
		}
		if !free(t, "raced-close") {
			t.Fatal("the raced grant is still held after Close")
		}
	})

	t.Run("cancelled, client kept", func(t *testing.T) {
		_, g, cancel, got := race(t, "raced-late")
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: %v, want context.Canceled", err)
		}
		g.release()
		// Given back by the cancelled Lock's clean-up, long before the TTL.
		testutil.Eventually(t, 15*time.Second, func() bool { return free(t, "raced-late") },
			"the cancelled Lock's clean-up to release the raced grant")
	})
}
