package paxlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxlocktest"
)

// clientVia connects a client whose registry is node i alone, so that
// its view comes from that node: isolated, it keeps naming itself master.
func clientVia(t *testing.T, cluster *paxlocktest.Cluster, i int) *client.Client {
	t.Helper()
	cfg := cluster.ClientConfig()
	cfg.Registry = []string{cfg.Registry[i-1]}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatalf("client via node %d: %v", i, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holdKey takes key with a 2 s hold that is not renewed, so that
// a new master can grant it soon, and returns the hold's token and the
// key's master; the caller isolates that master.
func holdKey(ctx context.Context, t *testing.T, cluster *paxlocktest.Cluster, key string, opts ...client.Option) (uint64, int) {
	t.Helper()
	a := cluster.Client(t).Mutex(key, append([]client.Option{client.TTL(2 * time.Second)}, opts...)...)
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	master := cluster.MasterOf(key)
	if master < 1 || master > cluster.Size() {
		t.Fatalf("MasterOf(%q) = %d", key, master)
	}
	return a.Token(), master
}

// isolate cuts node i off from its peers until the test ends.
func isolate(t *testing.T, cluster *paxlocktest.Cluster, i int) {
	t.Helper()
	if err := cluster.Isolate(i); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Heal(i) })
}

// eventWithin is how long a watcher may take to hear of a grant by the
// new master: far above a re-registration's backoff and view refresh on
// a loaded machine, far below "never".
const eventWithin = 30 * time.Second

// TestWatchIsolatedMaster: a watch registered over a client whose view
// comes from the key's master alone hears of the grant a new master
// makes after that master is cut off from its peers (its clients'
// connections kept): the master that steps down tells the watch it is
// gone (EventMoved, which the client never delivers) and the client
// registers it again at the new master, with no polling.
func TestWatchIsolatedMaster(t *testing.T) {
	cluster := paxlocktest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const key = "watch-iso"
	first, master := holdKey(ctx, t, cluster, key)
	w, err := clientVia(t, cluster, master).Watch(ctx, key, first, client.Continuous())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	isolate(t, cluster, master)
	b := cluster.Client(t).Mutex(key, client.TTL(10*time.Second))
	if err := b.Lock(ctx); err != nil {
		t.Fatalf("second client after isolating master %d: %v", master, err)
	}
	deadline := time.NewTimer(eventWithin)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watch ended: %v", w.Err())
			}
			if ev.Type == wire.EventMoved {
				t.Fatalf("EventMoved delivered to the user: %+v", ev)
			}
			if ev.Type == client.EventAcquired && ev.Token == b.Token() {
				return
			}
		case <-deadline.C:
			t.Fatalf("no EventAcquired of token %d within %v of the new master's grant (old master %d isolated)", b.Token(), eventWithin, master)
		}
	}
}

// TestObserveIsolatedMaster: Election.Observe, built on a watch, reports
// the leader a new master grants after the old master of the election's
// key is cut off from its peers, to an observer whose view comes from the
// old master alone.
func TestObserveIsolatedMaster(t *testing.T) {
	cluster := paxlocktest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const key = "elect-iso"
	_, master := holdKey(ctx, t, cluster, key, client.Value("a"))
	leaders := clientVia(t, cluster, master).Election(key).Observe(ctx)
	if l := <-leaders; l.Value != "a" {
		t.Fatalf("first leader %+v, want a", l)
	}
	isolate(t, cluster, master)
	b := cluster.Client(t).Election(key, client.TTL(10*time.Second))
	if err := b.Campaign(ctx, "b"); err != nil {
		t.Fatalf("campaign after isolating master %d: %v", master, err)
	}
	deadline := time.NewTimer(eventWithin)
	defer deadline.Stop()
	for {
		select {
		case l, ok := <-leaders:
			if !ok {
				t.Fatal("Observe ended")
			}
			if l.Value == "b" {
				return
			}
		case <-deadline.C:
			t.Fatalf("no leader b observed within %v of its election (old master %d isolated)", eventWithin, master)
		}
	}
}
