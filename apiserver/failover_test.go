package apiserver

import (
	"context"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/wire"
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
