package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// TestMultiLockAgainstCluster: all or none, a token per key, rollback of
// what a TryLock took when a later key is held, and two multi-locks over
// the same keys given in opposite orders never deadlocking.
func TestMultiLockAgainstCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2 := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	keys := []string{"ma", "mb", "mc", "md"}
	ml := c1.MultiLock(keys, client.TTL(10*time.Second))
	if err := ml.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		st, err := c2.State(ctx, k)
		if err != nil || !st.Held || st.Token != ml.Token(k) || st.Token == 0 {
			t.Fatalf("key %s: state %+v (%v), token %d", k, st, err, ml.Token(k))
		}
	}
	if err := ml.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("second unlock: %v", err)
	}
	// The last key in acquisition order is held by another: TryLock fails
	// on it and leaves the others free.
	order := ml.Keys()
	last := order[len(order)-1]
	other := c2.Mutex(last, client.TTL(10*time.Second))
	if err := other.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	var le *client.LockedError
	if err := c1.MultiLock(keys).TryLock(ctx); !errors.As(err, &le) || le.Key != last {
		t.Fatalf("try-lock with %s held: %v", last, err)
	}
	for _, k := range order[:len(order)-1] {
		if st, err := c2.State(ctx, k); err != nil || st.Held {
			t.Fatalf("key %s after the rollback: %+v %v", k, st, err)
		}
	}
	// Lock waits for it, holding the keys before it, and gets it.
	done := make(chan error, 1)
	waiting := c1.MultiLock(keys)
	go func() { done <- waiting.Lock(ctx) }()
	waitFor(t, "the multi-lock to queue on "+last, func() bool {
		st, err := c2.State(ctx, last)
		return err == nil && st.QueueLen == 1
	})
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := waiting.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Opposite orders, contending: every round completes.
	reversed := []string{"md", "mc", "mb", "ma"}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, ks := range [][]string{keys, reversed} {
		c := []*client.Client{c1, c2}[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 20 {
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				m := c.MultiLock(ks, client.TTL(10*time.Second))
				err := m.Lock(lctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("client %d round %d: %w", i, round, err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("client %d round %d: unlock: %w", i, round, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// sameGroupKeys returns n keys of namespace "ns" that share one lock
// group (of 15).
func sameGroupKeys(t *testing.T, n int) []string {
	t.Helper()
	byGroup := map[int][]string{}
	for i := 0; ; i++ {
		k := fmt.Sprintf("acct:%d", i)
		g := wire.GroupOf(wire.KeyHash("ns", k), 15)
		byGroup[g] = append(byGroup[g], k)
		if len(byGroup[g]) == n {
			return byGroup[g]
		}
	}
}

// TestMultiLockOneCommandPerGroup: a TryLock of keys of one group is one
// Paxos command — every key gets the same token, the command's instance
// (a TryLock that took the keys one request each would get a token per
// instance) — and a contender's try-lock of any of those keys meanwhile
// is refused; then the group's master is stopped in the middle: the keys
// stay held (no double grant), and after they are released a new
// multi-lock gets tokens above the old ones.
func TestMultiLockOneCommandPerGroup(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2 := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	keys := sameGroupKeys(t, 4)
	// A TTL that outlasts a master change on a loaded machine: a hold
	// that expired meanwhile would be free, and look like a double grant.
	ml := c1.MultiLock(keys, client.TTL(30*time.Second), client.AutoRenew())
	if err := ml.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := ml.Token(keys[0])
	for _, k := range keys {
		if ml.Token(k) != tok || tok == 0 {
			t.Fatalf("tokens differ: %s %d, %s %d: the group's keys were not one command", keys[0], tok, k, ml.Token(k))
		}
	}
	var le *client.LockedError
	if err := c2.MultiLock(keys[1:3]).TryLock(ctx); !errors.As(err, &le) || le.Holder.Client != c1.ID() {
		t.Fatalf("contender's multi try-lock: %v", err)
	}
	// Stop the group's master; the keys must stay held meanwhile.
	tc.stop(tc.masterIndex("ns", keys[0]))
	for _, k := range keys {
		if err := c2.Mutex(k).TryLock(ctx); !errors.Is(err, client.ErrLocked) {
			select {
			case <-ml.Mutex(k).Lost():
				t.Fatalf("%s after the master change: %v, after the holder lost its hold (expired, not a double grant)", k, err)
			default:
			}
			t.Fatalf("%s after the master change: %v (double grant?)", k, err)
		}
	}
	select {
	case <-ml.Mutex(keys[0]).Lost():
		t.Fatal("lost across the master change")
	default:
	}
	if err := ml.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ml2 := c2.MultiLock(keys)
	if err := ml2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ml2.Token(k) <= tok {
			t.Fatalf("%s: token %d after %d", k, ml2.Token(k), tok)
		}
	}
	if err := ml2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
