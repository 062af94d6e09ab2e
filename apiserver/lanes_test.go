package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/api/paxlock/v1/paxlockv1connect"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/server"
)

// The namespace TestBrokenRelayCostsItsCallsOnly breaks relays of: no
// other test of the shared cluster uses it, so the relays it breaks are
// its own.
const (
	relayNS     = "other"
	relaySecret = "x"
)

// rawClient is a LockService client of node i's API that never retries
// (Connect protocol, HTTP/1.1): what a call was answered is what the test
// sees.
func (c *apiCluster) rawClient(i int, ns, secret string) paxlockv1connect.LockServiceClient {
	var p http.Protocols
	p.SetHTTP1(true)
	hc := &http.Client{Transport: basicAuth{ns: ns, secret: secret, next: &http.Transport{Protocols: &p}}}
	return paxlockv1connect.NewLockServiceClient(hc, "http://"+c.apis[i].Addr())
}

// TestBrokenRelayCostsItsCallsOnly: node 1's API serves a blocked
// acquire of a key another node B masters (over node 1's relay to B) and
// one of a key B does not master. Breaking node 1's relays to B answers
// the first UNAVAILABLE, while the second keeps its place in its queue
// and is granted by the holder's release; a read of B's key on node 1
// is answered over a fresh session. A master change of either key's
// group during an attempt (leases lapse on a loaded machine) makes the
// attempt void; it is tried again with other keys.
func TestBrokenRelayCostsItsCallsOnly(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	for try := 1; try <= 3; try++ {
		if brokenRelayAttempt(t, c, try) {
			return
		}
		t.Logf("attempt %d: a master changed under it; trying again", try)
	}
	t.Fatal("three attempts saw a master change")
}

// relayKeys returns a key of relayNS whose group a node other than node
// 1 masters in node 1's view (that node is b) and a key whose group b
// does not master, with their groups, named after prefix.
func relayKeys(t *testing.T, c *apiCluster, prefix string) (k1, k2 string, b uint32, g1, g2 int) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() bool {
		v := c.nodes[0].View()
		if v == nil || len(v.Groups) == 0 {
			return false
		}
		k1, k2, b = "", "", 0
		for i := 0; i < 4000 && (k1 == "" || k2 == ""); i++ {
			k := prefix + strconv.Itoa(i)
			g := wire.GroupOf(wire.KeyHash(relayNS, k), len(v.Groups))
			m := v.Groups[g].Master
			switch {
			case m == 0:
			case k1 == "" && m != 1:
				k1, b, g1 = k, m, g
			case k1 != "" && k2 == "" && m != b:
				k2, g2 = k, g
			}
		}
		return k1 != "" && k2 != ""
	}, "node 1 to see a group mastered elsewhere and one mastered by another node")
	return k1, k2, b, g1, g2
}

// brokenRelayAttempt runs TestBrokenRelayCostsItsCallsOnly once; false
// when a master of its keys' groups changed meanwhile (void attempt).
func brokenRelayAttempt(t *testing.T, c *apiCluster, try int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k1, k2, b, g1, g2 := relayKeys(t, c, fmt.Sprintf("brk%d-", try))
	epochs := func() [2]uint64 {
		v := c.nodes[0].View()
		return [2]uint64{v.Groups[g1].Epoch, v.Groups[g2].Epoch}
	}
	before := epochs()
	holder := c.client(0, relayNS, relaySecret)
	raw := c.rawClient(0, relayNS, relaySecret)
	tokens := map[string]uint64{}
	for _, k := range []string{k1, k2} {
		a, err := acquire(ctx, holder, &paxlockv1.AcquireRequest{Key: k, Owner: "holder", TtlMs: 30000})
		if err != nil {
			t.Fatal(err)
		}
		tokens[k] = a.Token
	}
	defer func() {
		for k, tok := range tokens {
			_, _ = holder.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: k, Owner: "holder", Token: tok}))
		}
	}()
	type result struct {
		r   *paxlockv1.AcquireResponse
		err error
	}
	waiters := map[string]chan result{}
	for _, k := range []string{k1, k2} {
		ch := make(chan result, 1)
		waiters[k] = ch
		go func() {
			r, err := acquire(ctx, raw, &paxlockv1.AcquireRequest{Key: k, Owner: "waiter", TtlMs: 30000, WaitMs: 40000})
			ch <- result{r, err}
		}()
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		for _, k := range []string{k1, k2} {
			st, err := holder.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: k}))
			if err != nil || st.Msg.State.QueueLen != 1 {
				return false
			}
		}
		return true
	}, "both waiters to queue on their masters")
	n, err := c.nodes[0].BreakRelays(relayNS, b)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("node 1 had no relay to node %d", b)
	}
	var r1 result
	select {
	case r1 = <-waiters[k1]:
	case <-ctx.Done():
		t.Fatal("the waiter on the broken relay was never answered")
	}
	if epochs() != before {
		return false
	}
	if codeOfErr(r1.err) != connect.CodeUnavailable {
		t.Fatalf("waiter on the broken relay: %v, %v; want UNAVAILABLE", r1.r, r1.err)
	}
	if _, err := raw.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: k1})); err != nil {
		t.Fatalf("a read of %s after the break: %v", k1, err)
	}
	if _, err := holder.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: k2, Owner: "holder", Token: tokens[k2]})); err != nil {
		t.Fatal(err)
	}
	delete(tokens, k2)
	var r2 result
	select {
	case r2 = <-waiters[k2]:
	case <-ctx.Done():
		t.Fatal("the waiter of the other master's key was not granted on release")
	}
	if epochs() != before {
		return false
	}
	if r2.err != nil || r2.r.Token == 0 {
		t.Fatalf("waiter of the other master's key: %v, %v; want granted after the holder's release", r2.r, r2.err)
	}
	_, _ = raw.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: k2, Owner: "waiter", Token: r2.r.Token}))
	return true
}

// TestLanePoolExceedsConnBounds: on a node whose connections may keep 4
// blocked acquires each (max_waits_per_conn), 10 API callers of one
// namespace all queue for keys of one master, over the several sessions
// the lane opens for them, and are all granted once their keys are
// released: the per-connection bound does not bound the API's callers.
func TestLanePoolExceedsConnBounds(t *testing.T) {
	t.Parallel()
	c, err := startCluster(1, func(_ string, cfg *server.Config) {
		cfg.MaxWaitsPerConn = 4
		for i := range cfg.Nodes {
			cfg.Nodes[i].ClientTLS = "" // no TLS here
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	ctx := tctx(t)
	const n = 10
	holder, raw := c.client(0, testNS, testSecret), c.rawClient(0, testNS, testSecret)
	tokens := make([]uint64, n)
	for i := range n {
		a, err := acquire(ctx, holder, &paxlockv1.AcquireRequest{Key: fmt.Sprintf("pool-%d", i), Owner: "holder", TtlMs: 30000})
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = a.Token
	}
	type result struct {
		i   int
		r   *paxlockv1.AcquireResponse
		err error
	}
	done := make(chan result, n)
	for i := range n {
		go func() {
			r, err := acquire(ctx, raw, &paxlockv1.AcquireRequest{Key: fmt.Sprintf("pool-%d", i), Owner: "waiter", TtlMs: 30000, WaitMs: 25000})
			done <- result{i, r, err}
		}()
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		select {
		case r := <-done:
			t.Fatalf("waiter %d answered while its key was held: %v, %v", r.i, r.r, r.err)
		default:
		}
		for i := range n {
			st, err := holder.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: fmt.Sprintf("pool-%d", i)}))
			if err != nil || st.Msg.State.QueueLen != 1 {
				return false
			}
		}
		return true
	}, "every waiter to queue")
	sessions := laneSessions(c.apis[0].svc, testNS)
	if sessions < 3 {
		t.Fatalf("%d sessions carry %d waits of at most 4 each", sessions, n)
	}
	for i := range n {
		if _, err := holder.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: fmt.Sprintf("pool-%d", i), Owner: "holder", Token: tokens[i]})); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		r := <-done
		if r.err != nil || r.r.Token <= tokens[r.i] {
			t.Fatalf("waiter %d: %v, %v; want granted after the release", r.i, r.r, r.err)
		}
	}
}

// laneSessions counts the sessions svc keeps for namespace ns, over all
// its lanes.
func laneSessions(svc *Service, ns string) int {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	n := 0
	for lane, ss := range svc.sessions {
		if lane.ns == ns {
			n += len(ss)
		}
	}
	return n
}
