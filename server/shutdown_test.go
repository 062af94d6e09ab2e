package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// goroutinesIn counts the live goroutines whose stack has a frame of fn
// (a function name as runtime.Stack prints it).
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	k := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			k++
		}
	}
	return k
}

// TestShutdownEndsNamespaceInstall: the namespace installation of a new
// cluster, still retrying (here every attempt fails, then one hangs, as
// when a round finds no quorum), is ended by Shutdown and waited for: no
// retry or sleep of it outlives the node.
func TestShutdownEndsNamespaceInstall(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	var calls atomic.Int32
	hanging := make(chan struct{})
	var ended atomic.Bool
	saved := installNamespaces
	installNamespaces = func(_ *group.Service, ctx context.Context, _ map[string]scramauth.Verifier) error {
		if calls.Add(1) == 1 {
			return errors.New("test: no quorum") // the loop backs off, then tries again
		}
		close(hanging)
		<-ctx.Done()
		ended.Store(true)
		return ctx.Err()
	}
	t.Cleanup(func() { installNamespaces = saved })

	tc := startCluster(t, 1)
	s := tc.nodes[0]
	select {
	case <-hanging:
	case <-time.After(30 * time.Second):
		t.Fatalf("the namespace installation was tried %d times, never hung", calls.Load())
	}
	if !s.initingNS.Load() {
		t.Fatal("the installation loop is not running")
	}
	tc.stop(0)
	if s.initingNS.Load() || !ended.Load() {
		t.Fatalf("Shutdown returned with the namespace installation still running (attempt ended: %v)", ended.Load())
	}
	if n := goroutinesIn("server.(*Server).initNamespaces"); n != 0 {
		t.Fatalf("%d initNamespaces goroutines after Shutdown", n)
	}
}

// TestShutdownEndsRelays: Shutdown ends and waits for the relays of the
// node's client connections, one open and carrying a wait, one still in
// its Hello to a master that does not answer (which must not sit out its
// 3 s deadline after Shutdown has returned).
func TestShutdownEndsRelays(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	tc := startCluster(t, 3)
	via := tc.nodes[0]
	viaIdx := 0

	// An open relay: a blocking acquire, forwarded to the master of its
	// key's group, queued behind a holder.
	holder := dialRaw(t, via.cfg.self().Client)
	holder.hello("ns", "s3cret", 7)
	waiter := dialRaw(t, via.cfg.self().Client)
	waiter.hello("ns", "s3cret", 8)
	var key string
	waitFor(t, "a key forwarded to another node's group", func() bool {
		for i := range 100 {
			k := fmt.Sprintf("relayed-%d", i)
			g := wire.GroupOf(wire.KeyHash("ns", k), via.cfg.Groups)
			if gv := via.View().Groups[g]; gv.Master != 0 && gv.Master != via.cfg.NodeID && !via.svc.Group(group.ID(g)).Serving() {
				r := holder.call(wire.TypeAcquire, &wire.Acquire{Key: k, Owner: wire.Owner{Client: cid(7), ID: 1}, Weight: 1,
					TTLMs: 30000, Redirects: wire.ForwardNow})
				if r.Status == wire.StatusSuccess {
					key = k
					return true
				}
			}
		}
		return false
	})
	if w := waiter.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(8), ID: 1}, Weight: 1, TTLMs: 30000,
		MaxWaitMs: wire.WaitForever, WaitID: 5, Redirects: wire.ForwardNow}); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire through the relay: %+v", w)
	}
	if via.stats.relays.Load() == 0 {
		t.Fatal("no relay opened")
	}

	// A relay stuck in its Hello: the "master" accepts and says nothing.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	var acceptWG sync.WaitGroup
	acceptWG.Add(1)
	go func() {
		defer acceptWG.Done()
		if nc, err := silent.Accept(); err == nil {
			accepted <- nc
		}
	}()
	// Closing the listener ends an Accept that never got a connection (a
	// failure below), so the wait cannot hang.
	defer func() {
		silent.Close()
		acceptWG.Wait()
	}()
	var c *conn
	via.conns.Range(func(k, _ any) bool {
		if cc := k.(*conn); cc.id().ClientID == cid(8) {
			c = cc
		}
		return c == nil
	})
	if c == nil {
		t.Fatal("the waiter's connection is not registered")
	}
	c.relayTo(99, silent.Addr().String())
	select {
	case nc := <-accepted:
		defer nc.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not dial")
	}
	// The holder's and the waiter's relays are open (one per connection
	// and master), one dials. A relay's reader is its session's (no other
	// session runs in this test).
	if n, r := goroutinesIn("server.(*relay).run"), goroutinesIn("session.(*Conn).readLoop"); n < 3 || r < 2 {
		t.Fatalf("%d relay writers and %d readers before Shutdown, want at least 3 and 2", n, r)
	}

	tc.stop(viaIdx)
	for _, fn := range []string{"server.(*relay).run", "session.(*Conn).readLoop"} {
		if n := goroutinesIn(fn); n != 0 {
			t.Fatalf("%d goroutines in %s after Shutdown", n, fn)
		}
	}
}

// TestShutdownTwiceAndConcurrently: Shutdown may be called again, and by
// several goroutines at once; every call returns (none hangs stopping the
// lock service a second time).
func TestShutdownTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	s := tc.nodes[0]
	tc.nodes[0] = nil // this test shuts it down
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- s.Shutdown(ctx) }()
	}
	var first error
	for i := range 3 {
		select {
		case err := <-errs:
			if i == 0 {
				first = err
			} else if !errors.Is(err, first) && (err == nil) != (first == nil) {
				t.Fatalf("concurrent Shutdowns disagree: %v and %v", first, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a concurrent Shutdown did not return")
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	select {
	case err := <-done:
		if (err == nil) != (first == nil) {
			t.Fatalf("a second Shutdown returned %v, the first %v", err, first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second Shutdown did not return")
	}
}
