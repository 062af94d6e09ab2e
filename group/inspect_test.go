package group

import (
	"context"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// TestHotKeys: HotKeys lists the keys with waiters over the groups a node
// serves, most waiters first, with their holders; a key that is only held,
// or served by another node, is not listed; n bounds the list; a closed
// service answers at once with nothing.
func TestHotKeys(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	s := newSink()
	hold := func(key string, o wire.Owner) wire.Response {
		r := c.do(s, Request{Op: OpAcquire, Key: key, Owner: o, TTL: 5 * time.Second})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %+v", key, r)
		}
		return r
	}
	wait := func(key string, o wire.Owner, id uint64) {
		if r := c.do(s, Request{Op: OpAcquire, Key: key, Owner: o, MaxWait: -1, WaitID: id}); r.Status != wire.StatusLockWait {
			t.Fatalf("wait on %s: %+v", key, r)
		}
	}
	// Find three keys of groups node 1 masters and one of another node's.
	var mine []string
	var theirs string
	for i := 0; len(mine) < 3 || theirs == ""; i++ {
		k := "hk" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if c.master("ns", k) == c.svc(1) {
			if len(mine) < 3 {
				mine = append(mine, k)
			}
		} else if theirs == "" {
			theirs = k
		}
	}
	a, b, idle := mine[0], mine[1], mine[2]
	ra := hold(a, owner(9, 1))
	hold(b, owner(9, 2))
	hold(idle, owner(9, 3))
	hold(theirs, owner(9, 4))
	wait(a, owner(1, 1), 1)
	wait(a, owner(2, 1), 2)
	wait(b, owner(3, 1), 3)
	wait(theirs, owner(4, 1), 4)

	hk, err := c.svc(1).HotKeys(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hk) != 2 || hk[0].Key != a || hk[1].Key != b {
		t.Fatalf("hot keys %+v, want %s (2 waiters) then %s (1)", hk, a, b)
	}
	top := hk[0]
	if top.Namespace != "ns" || top.Waiters != 2 || top.Group != wire.GroupOf(wire.KeyHash("ns", a), 15) {
		t.Fatalf("top hot key %+v", top)
	}
	if len(top.Holders) != 1 || top.Holders[0].Owner != owner(9, 1).String() || top.Holders[0].Token != ra.Token ||
		top.Holders[0].Kind != "exclusive" || top.Holders[0].TTLLeftMs <= 0 || top.Holders[0].TTLLeftMs > 5000 {
		t.Fatalf("holders of %s: %+v, want owner %s token %d", a, top.Holders, owner(9, 1), ra.Token)
	}
	if hk, _ := c.svc(1).HotKeys(context.Background(), 1); len(hk) != 1 || hk[0].Key != a {
		t.Fatalf("n=1: %+v", hk)
	}
	var other []HotKey
	for _, id := range []paxos.NodeID{2, 3} {
		h, err := c.svc(id).HotKeys(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		other = append(other, h...)
	}
	if len(other) != 1 || other[0].Key != theirs || other[0].Waiters != 1 {
		t.Fatalf("nodes 2 and 3 list %+v, want only %s", other, theirs)
	}
	// A waiter that gives up is no longer counted.
	if r := c.do(s, Request{Op: OpCancelWait, Key: b, Owner: owner(3, 1), WaitID: 3}); r.Status != wire.StatusSuccess {
		t.Fatalf("cancel wait: %+v", r)
	}
	if hk, _ := c.svc(1).HotKeys(context.Background(), 10); len(hk) != 1 || hk[0].Key != a {
		t.Fatalf("after the cancel: %+v, want only %s", hk, a)
	}
	c.svc(1).Close()
	if hk, err := c.svc(1).HotKeys(context.Background(), 10); err != nil || len(hk) != 0 {
		t.Fatalf("closed service: %+v, %v", hk, err)
	}
}
