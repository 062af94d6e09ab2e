package host

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/clock"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// TestHostRunsOnInjectedClock: a Host takes its ticks and leases from the
// clock it is given. On a fake clock that does not move, a lone replica
// never gets the ticks it needs to become master, however long it runs;
// once the clock moves, it is elected, serves, and commits.
func TestHostRunsOnInjectedClock(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	fc := &armCounter{Fake: clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
	const tick = 10 * time.Millisecond
	ep := paxostest.NewMemNetwork().Join(1, nil)
	h := New(Config{Self: 1, Store: st, Tick: tick, Clock: fc, Transport: ep, Logger: testutil.Logger()})
	ep.SetHandler(h.Deliver)
	sm := newKV()
	g, err := h.AddReplica(ReplicaConfig{Core: paxos.Config{Group: 1, Peers: []paxos.NodeID{1}, HeartbeatTicks: 5, LeaseTicks: 50}}, sm)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	defer h.Stop()

	// The host's loop has run and waits for its next tick on the fake
	// clock, which does not move: no tick, no election.
	testutil.Eventually(t, 30*time.Second, func() bool { return fc.armed.Load() > 0 },
		"the host to set its tick timer on the fake clock")
	if s := g.Status(); s.Master != 0 || s.Serving {
		t.Fatalf("elected on a clock that did not move: %+v", s)
	}
	testutil.Eventually(t, 60*time.Second, func() bool {
		fc.Advance(tick)
		return g.Status().Serving
	}, "the lone replica to serve as the fake clock moves")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := g.Propose(ctx, []byte("k=v")); err != nil {
		t.Fatal(err)
	}
	if v, ok := sm.get("k"); !ok || v != "v" {
		t.Fatalf("k = %q, %v after the proposal", v, ok)
	}
}

// armCounter is a fake clock that counts the timers set on it.
type armCounter struct {
	*clock.Fake
	armed atomic.Int64
}

// AfterFunc counts the timer and sets it on the fake clock.
func (c *armCounter) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.armed.Add(1)
	return c.Fake.AfterFunc(d, f)
}
