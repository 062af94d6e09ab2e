package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
)

// setQuota sets namespace ns's quota through node i's admin endpoint (a
// node that does not master group 0 redirects) and waits until every node
// enforces it.
func (tc *testCluster) setQuota(t *testing.T, i int, ns string, q adminapi.NamespaceQuota) {
	t.Helper()
	if code := adminDo(t, http.MethodPut, "http://"+tc.cfgs[i].AdminAddr+"/namespaces/"+ns+"/quota", q); code != http.StatusNoContent {
		t.Fatalf("PUT quota: HTTP %d", code)
	}
	want := group.Quota{Held: q.Held, Waiters: q.Waiters, Rate: q.Rate, Burst: q.Burst}
	for _, s := range tc.nodes {
		waitFor(t, "every node to enforce the quota", func() bool { return s.svc.QuotaUsage()[ns].Quota == want })
	}
}

// TestQuotaIsolatesNamespaces: namespace ns, hammered past its rate
// quota, gets OVERLOADED answers naming the quota with a RetryAfterMs,
// while namespace other's requests in the same period all succeed; the
// refusals show in /metrics, in GET /namespaces/quotas and in the
// console's cluster status. Then, with a held-locks quota of one, a
// blocking Lock of the Go client that the quota keeps refusing ends with
// its context and says why (ErrOverloaded).
func TestQuotaIsolatesNamespaces(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	waitFor(t, "configured namespaces installed", func() bool { return tc.systemMaster().svc.NamespacesInitialised() })
	tc.setQuota(t, 2, "ns", adminapi.NamespaceQuota{Rate: 30, Burst: 6})
	if code := adminDo(t, http.MethodPut, "http://"+tc.cfgs[0].AdminAddr+"/namespaces/nope/quota", adminapi.NamespaceQuota{Held: 1}); code != http.StatusNotFound {
		t.Fatalf("quota of an unknown namespace: HTTP %d", code)
	}
	if code := adminDo(t, http.MethodPut, "http://"+tc.cfgs[0].AdminAddr+"/namespaces/ns/quota", adminapi.NamespaceQuota{Burst: 3}); code != http.StatusBadRequest {
		t.Fatalf("a burst without a rate: HTTP %d", code)
	}

	// Placement may still move a master or two after start: wait until
	// each node serves its share, and follow a redirect if one comes.
	waitFor(t, "the masters spread evenly", func() bool {
		for _, s := range tc.nodes {
			n := 0
			for _, g := range s.svc.Groups() {
				if g.Serving() {
					n++
				}
			}
			if n != 15/len(tc.nodes) {
				return false
			}
		}
		return true
	})
	dial := func(addr, ns, secret string, n uint64) *rawConn {
		rc := dialRaw(t, addr)
		if r := rc.hello(ns, secret, n); r.Status != wire.StatusSuccess {
			t.Fatalf("hello %s: %+v", ns, r)
		}
		return rc
	}
	const key, n = "hot", 300
	a := dial(tc.cfgs[tc.masterIndex("ns", key)].self().Client, "ns", "s3cret", 1)
	mi := tc.masterIndex("other", key)
	b := dial(tc.cfgs[mi].self().Client, "other", "x", 2)
	// Interleave: each round sends namespace ns a pipelined burst of
	// try-locks of one key and namespace other one acquire and release.
	over := 0
	for round := range n / 10 {
		var ids []uint64
		redirect := ""
		for i := range 10 {
			ids = append(ids, a.send(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: uint64(round*10 + i + 1)}, Weight: 1, TTLMs: 10000}))
		}
		for got := 0; got < len(ids); {
			f, m, err := a.read()
			if err != nil {
				t.Fatal(err)
			}
			r, ok := m.(*wire.Response)
			if !ok || f.ReqID == 0 {
				continue
			}
			got++
			switch r.Status {
			case wire.StatusOverloaded:
				if r.RetryAfterMs == 0 || !strings.Contains(r.Msg, "quota") {
					t.Fatalf("refusal %+v: want RetryAfterMs and a Msg naming the quota", r)
				}
				over++
			case wire.StatusSuccess, wire.StatusLockOccupied:
			case wire.StatusNoMaster, wire.StatusTimeout:
				// The key's master changed (a lease lapsed on a loaded
				// machine): the try-lock was not decided, or its outcome
				// is unknown; it is no rate refusal either way. The next
				// round's go to the node, which then knows the master.
			case wire.StatusMasterRedirect:
				redirect = r.Redirect
			default:
				t.Fatalf("namespace ns: %+v", r)
			}
		}
		if redirect != "" {
			a = dial(redirect, "ns", "s3cret", 1)
		}
		o := wire.Owner{Client: cid(2), ID: uint64(round + 1)}
		r := b.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: o, Weight: 1, TTLMs: 10000})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("namespace other, round %d: acquire %+v", round, r)
		}
		if r := b.callMaster(wire.TypeRelease, &wire.Release{Key: key, Owner: o, Token: r.Token}); r.Status != wire.StatusSuccess {
			t.Fatalf("namespace other, round %d: release %+v", round, r)
		}
	}
	if over == 0 {
		t.Fatalf("no request of %d past the rate quota refused", n)
	}
	t.Logf("namespace ns: %d of %d requests refused by the rate quota; namespace other: all %d succeeded", over, n, 2*n/10)

	// Refusals are counted where they happened, and reported.
	refused := 0.0
	for _, c := range tc.cfgs {
		refused += sumOf(scrape(t, c.AdminAddr), "paxlock_namespace_quota_refusals_total", map[string]string{"namespace": "ns", "kind": "rate"})
	}
	if int(refused) != over {
		t.Fatalf("/metrics counts %v rate refusals, the client saw %d", refused, over)
	}
	if lim := sumOf(scrape(t, tc.cfgs[0].AdminAddr), "paxlock_namespace_quota_limit", map[string]string{"namespace": "ns", "kind": "rate"}); lim != 30 {
		t.Fatalf("quota limit metric %v, want 30", lim)
	}
	var qs []adminapi.QuotaStatus
	if err := json.Unmarshal(adminGetOK(t, tc.cfgs[mi].AdminAddr, "/namespaces/quotas"), &qs); err != nil || len(qs) != 1 || qs[0].Namespace != "ns" || qs[0].Quota.Rate != 30 {
		t.Fatalf("GET /namespaces/quotas: %+v %v", qs, err)
	}
	var cs adminapi.ClusterStatus
	if err := json.Unmarshal(adminGetOK(t, tc.cfgs[0].AdminAddr, "/cluster"), &cs); err != nil || len(cs.Quotas) != 1 || cs.Quotas[0].Refused["rate"] != uint64(over) {
		t.Fatalf("console quotas: %+v %v", cs.Quotas, err)
	}

	// A held-locks quota of one, with one key held for longer than the
	// test lasts (the burst's 10 s holds may have expired by now on a
	// loaded machine): a blocking Lock on another key is refused until
	// its context ends, and says so.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held := c.Mutex("quota-held", client.TTL(2*time.Minute))
	if err := held.Lock(ctx); err != nil {
		t.Fatalf("Lock before the held quota: %v", err)
	}
	tc.setQuota(t, 0, "ns", adminapi.NamespaceQuota{Held: 1})
	for _, s := range tc.nodes {
		waitFor(t, "the held keys counted", func() bool { return s.svc.QuotaUsage()["ns"].Held > 0 })
	}
	// Each try's context is short; a try that ended before any answer
	// came (a loaded machine) proves nothing and is made again.
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		defer cancelShort()
		another := c.Mutex("another")
		err := another.Lock(short)
		if err == nil {
			t.Fatal("Lock granted past the held quota")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock refused by the held quota: %v, want ErrOverloaded until its context ended", err)
		}
		return errors.Is(err, client.ErrOverloaded), err.Error()
	}, "a Lock refused by the held quota until its context ended (ErrOverloaded and DeadlineExceeded)")
}
