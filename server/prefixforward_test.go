package server

import (
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// TestServerForwardsPrefixWatch: a prefix watch on a group another node
// masters is redirected within the redirect budget and forwarded with
// ForwardNow (by its Group); the master's events come back over the
// relay, and the forwarded Unwatch drops it.
func TestServerForwardsPrefixWatch(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	const key = "pfx-fwd/k"
	mi := tc.masterIndex("ns", key)
	groups := tc.cfgs[mi].Groups
	if groups == 0 {
		groups = wire.DefaultGroups
	}
	g := uint32(wire.GroupOf(wire.KeyHash("ns", key), groups))
	via := tc.nodes[(mi+1)%3]
	b := dialRaw(t, via.cfg.self().Client)
	if r := b.hello("ns", "s3cret", 9); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	watch := func(id uint64, redirects uint8) *wire.Response {
		return b.call(wire.TypeWatch, &wire.Watch{Key: "pfx-fwd/", WatchID: id, Flags: wire.FlagPrefix | wire.FlagContinuous, Group: g, Redirects: redirects})
	}
	if r := watch(1, 0); r.Status != wire.StatusMasterRedirect {
		t.Fatalf("prefix watch within the redirect budget: %+v, want MASTER_REDIRECT", r)
	}
	if r := watch(2, wire.ForwardNow); r.Status != wire.StatusSuccess {
		t.Fatalf("prefix watch with ForwardNow: %+v, want SUCCESS through the relay", r)
	}
	owner := wire.Owner{Client: cid(8), ID: 1}
	a := tc.masterConn("ns", key, 8)
	r := a.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: owner, Weight: 1, TTLMs: 10000})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire at the master: %+v", r)
	}
	for {
		f, m, err := b.read()
		if err != nil {
			t.Fatalf("waiting for the relayed event: %v", err)
		}
		if ev, ok := m.(*wire.WatchEvent); ok && f.ReqID == 0 {
			if ev.WatchID != 2 || ev.Key != key || ev.Event != wire.EventAcquired || ev.Token != r.Token {
				t.Fatalf("relayed prefix event %+v, want acquired of %s with token %d on watch 2", ev, key, r.Token)
			}
			break
		}
	}
	if u := b.call(wire.TypeUnwatch, &wire.Unwatch{Key: "pfx-fwd/", WatchID: 2, Flags: wire.FlagPrefix, Group: g, Redirects: wire.ForwardNow}); u.Status != wire.StatusSuccess {
		t.Fatalf("unwatch with ForwardNow: %+v", u)
	}
}
