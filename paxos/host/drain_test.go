package host

import (
	"testing"
	"time"
	"unsafe"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// TestDrainSkipsIdleGroups checks the host loop's shortcut (Replica.drain
// with its queued flag): a group nothing was queued for and no tick is due
// for is left untouched; a delivery, even an empty one, is drained and
// marks the group for republishing; and the queue handed back for the next
// delivery never shares its array with the one the loop keeps as spare
// (were it to, a delivery would write into the slice the loop reads).
func TestDrainSkipsIdleGroups(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: testutil.Logger(), MemTableSize: 4 << 20, CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	// The host is never started: the test is its loop.
	host := New(Config{Self: 1, Store: st, Tick: time.Hour, Logger: testutil.Logger()})
	g, err := host.AddReplica(ReplicaConfig{Core: paxos.Config{Group: 1, Peers: []paxos.NodeID{1, 2, 3}, HeartbeatTicks: 5, LeaseTicks: 50}}, newKV())
	if err != nil {
		t.Fatal(err)
	}
	now := g.base // no tick due for an hour
	g.touched = false

	g.drain(now)
	if g.touched || g.queued.Load() {
		t.Fatalf("an idle group was drained: touched %v, queued %v", g.touched, g.queued.Load())
	}

	msg := paxos.Message{Type: paxos.MsgHeartbeat, Group: 1, From: 2, To: 1}
	for round, msgs := range [][]paxos.Message{{msg}, nil, {msg, msg}, nil} {
		g.deliver(msgs)
		if !g.queued.Load() {
			t.Fatalf("round %d: a delivery did not mark the group queued", round)
		}
		g.touched = false
		g.drain(now)
		if !g.touched || g.queued.Load() || len(g.inbox) != 0 {
			t.Fatalf("round %d: after the drain touched %v, queued %v, inbox %d", round, g.touched, g.queued.Load(), len(g.inbox))
		}
		if cap(g.inbox) > 0 && cap(g.inboxSpare) > 0 && unsafe.SliceData(g.inbox[:1]) == unsafe.SliceData(g.inboxSpare[:1]) {
			t.Fatalf("round %d: the inbox and its spare share one array", round)
		}
	}
}
