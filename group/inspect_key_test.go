package group

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestInspectKey: the key's master reports its holder with value, token
// and validity left, and its queue in the order it is served, a heavier
// waiter ahead of a lighter one that came less than their weights'
// difference × WeightAging before it, each with the time it waited; a
// node that does not master the key's group says so; a free key has no
// holders.
func TestInspectKey(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	s := newSink()
	var k string
	for i := 0; k == ""; i++ {
		if key := "ik" + string(rune('a'+i)); c.master("ns", key) == c.svc(1) {
			k = key
		}
	}
	held := c.do(s, Request{Op: OpAcquire, Key: k, Owner: owner(9, 1), TTL: 5 * time.Second, Value: "host-a"})
	if held.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", held)
	}
	if r := c.do(s, Request{Op: OpAcquire, Key: k, Owner: owner(1, 1), MaxWait: -1, WaitID: 1, Weight: 1}); r.Status != wire.StatusLockWait {
		t.Fatalf("wait 1: %+v", r)
	}
	fc.Advance(3 * time.Second)
	if r := c.do(s, Request{Op: OpAcquire, Key: k, Owner: owner(2, 1), MaxWait: -1, WaitID: 2, Weight: 10}); r.Status != wire.StatusLockWait {
		t.Fatalf("wait 2: %+v", r)
	}
	d, err := c.svc(1).InspectKey(context.Background(), "ns", k)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Held || d.Kind != "exclusive" || d.Key != k || d.Namespace != "ns" || d.Group != wire.GroupOf(wire.KeyHash("ns", k), 15) {
		t.Fatalf("detail %+v", d)
	}
	if len(d.Holders) != 1 || d.Holders[0].Owner != owner(9, 1).String() || d.Holders[0].Token != held.Token || d.Holders[0].Value != "host-a" ||
		d.Holders[0].TTLLeftMs <= 0 || d.Holders[0].TTLLeftMs > 2000 || d.Holders[0].Revoked {
		t.Fatalf("holders %+v, want owner %s token %d, value host-a, about 2 s left", d.Holders, owner(9, 1), held.Token)
	}
	if len(d.Waiters) != 2 || d.Waiters[0].Owner != owner(2, 1).String() || d.Waiters[0].Weight != 10 || d.Waiters[0].WaitedMs != 0 ||
		d.Waiters[1].Owner != owner(1, 1).String() || d.Waiters[1].Weight != 1 || d.Waiters[1].WaitedMs != 3000 || d.Waiters[1].Kind != "exclusive" {
		t.Fatalf("waiters %+v, want owner 2/1 (weight 10, waited 0) then 1/1 (weight 1, waited 3 s)", d.Waiters)
	}
	if _, err := c.svc(2).InspectKey(context.Background(), "ns", k); !errors.Is(err, ErrNotMaster) {
		t.Fatalf("a node that does not master the key: %v, want ErrNotMaster", err)
	}
	var free string
	for i := 0; free == ""; i++ {
		if key := "fk" + string(rune('a'+i)); c.master("ns", key) == c.svc(1) {
			free = key
		}
	}
	if d, err := c.svc(1).InspectKey(context.Background(), "ns", free); err != nil || d.Held || len(d.Holders) != 0 || len(d.Waiters) != 0 {
		t.Fatalf("a free key: %+v, %v", d, err)
	}
	if _, err := c.svc(1).InspectKey(context.Background(), "ns", ""); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("an empty key: %v", err)
	}
}
