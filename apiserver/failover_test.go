package apiserver

import (
	"context"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestMasterChange: a key whose group node 3 masters is taken through
// node 1's API (forwarded over node 1's relay); node 3 stops; the same
// owner's next acquire through node 1 (retried while UNAVAILABLE, as a
// client does) is served by the new master with a higher token: node 1's
// session into itself reopens if the broken relay closed it.
func TestMasterChange(t *testing.T) {
	// Not parallel: its own cluster runs before the shared one starts,
	// not beside it (two clusters at once starve a 2-core machine's leases).
	c, err := startCluster(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	ctx := tctx(t)
	key := ""
	testutil.Eventually(t, 20*time.Second, func() bool {
		st := c.nodes[0].Status()
		for i := 0; i < 1000 && key == ""; i++ {
			k := "mc-" + strconv.Itoa(i)
			g := wire.GroupOf(wire.KeyHash(testNS, k), len(st.Groups))
			for _, gs := range st.Groups {
				if gs.Group == g && gs.Master == 3 {
					key = k
				}
			}
		}
		return key != ""
	}, "node 3 to master a group")
	cl := c.client(0, testNS, testSecret)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: key, Owner: "o", TtlMs: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: key, Owner: "o", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = c.nodes[2].Shutdown(sctx)
	cancel()
	if err != nil {
		t.Logf("shutdown node 3: %v", err)
	}
	var b *paxlockv1.AcquireResponse
	testutil.EventuallyWith(t, 20*time.Second, func() (bool, string) {
		var err error
		b, err = acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: key, Owner: "o", TtlMs: 2000})
		if codeOfErr(err) == connect.CodeUnavailable {
			return false, err.Error()
		}
		if err != nil {
			t.Fatalf("acquire after the master change: %v", err)
		}
		return true, ""
	}, "the acquire to be served by a new master")
	if b.Token <= a.Token {
		t.Fatalf("token %d after the master change, want above %d", b.Token, a.Token)
	}
}

// keyOf returns a key of testNS whose group node masters.
func keyOf(t *testing.T, c *apiCluster, node uint32) string {
	t.Helper()
	key := ""
	testutil.Eventually(t, 20*time.Second, func() bool {
		st := c.nodes[node-1].Status()
		for i := 0; i < 1000 && key == ""; i++ {
			k := "iso-" + strconv.Itoa(i)
			g := wire.GroupOf(wire.KeyHash(testNS, k), len(st.Groups))
			for _, gs := range st.Groups {
				if gs.Group == g && gs.Master == node {
					key = k
				}
			}
		}
		return key != ""
	}, "the node to master a group")
	return key
}

// TestWatchIsolatedMaster: a Watch stream served by the API of a key's
// master does not wait for ever once that master is cut off from its
// peers and steps down: its session hears EventMoved, or a view with a
// new epoch for the group, and registers the watch again, so the stream
// either reports the new master's grant or ends UNAVAILABLE (watch again
// elsewhere); it never shows the moved event.
func TestWatchIsolatedMaster(t *testing.T) {
	c, err := startCluster(3, nil) // not parallel: see TestMasterChange
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	ctx, stop := context.WithTimeout(context.Background(), 120*time.Second)
	defer stop()
	key := keyOf(t, c, 3)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.client(2, testNS, testSecret).Watch(sctx, connect.NewRequest(&paxlockv1.WatchRequest{Key: key, Continuous: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := stream.ResponseHeader(), stream.Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[2].CutPeers(1, 2); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.nodes[2].CutPeers() }()
	events := make(chan *paxlockv1.WatchEvent)
	ended := make(chan error, 1)
	go func() {
		for stream.Receive() {
			select {
			case events <- stream.Msg():
			case <-sctx.Done():
				return
			}
		}
		ended <- stream.Err()
	}()
	var b *paxlockv1.AcquireResponse
	testutil.EventuallyWith(t, 60*time.Second, func() (bool, string) {
		// An attempt that reached the isolated node waits for a proposal
		// that cannot commit: bounded, as a client's attempt is.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		b, err = acquire(actx, c.client(0, testNS, testSecret), &paxlockv1.AcquireRequest{Key: key, Owner: "o", TtlMs: 10000})
		if code := codeOfErr(err); code == connect.CodeUnavailable || code == connect.CodeDeadlineExceeded {
			return false, err.Error()
		}
		if err != nil {
			t.Fatalf("acquire with the old master isolated: %v", err)
		}
		return true, ""
	}, "a new master to grant the key")
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case ev := <-events:
			if ev.Kind == paxlockv1.WatchEventKind_WATCH_EVENT_KIND_UNSPECIFIED {
				t.Fatalf("the stream showed an internal event: %v", ev)
			}
			if ev.Kind == paxlockv1.WatchEventKind_WATCH_EVENT_KIND_ACQUIRED && ev.Token == b.Token {
				t.Logf("the stream reported the new master's grant")
				return
			}
		case err := <-ended:
			if codeOfErr(err) != connect.CodeUnavailable {
				t.Fatalf("the stream ended with %v, want UNAVAILABLE or the grant", err)
			}
			t.Logf("the stream ended: %v", err)
			return
		case <-deadline.C:
			t.Fatalf("the stream neither reported the grant of token %d nor ended within 30 s of it", b.Token)
		}
	}
}
