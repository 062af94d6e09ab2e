package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// TestPrimitivesAcrossMasterChange: a downgraded read-write lock with a
// writer queued behind it, a lock taken through Mutex.Locker, and List,
// across a stop of their group's master. The new master has the
// downgraded read hold with its token (the queued writer's client
// re-queues it there), the Locker's hold, and List shows both; releasing
// the read hold grants the writer with a higher token, and the Locker's
// Unlock frees its key.
func TestPrimitivesAcrossMasterChange(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c1, c2 := newClient(t, tc), newClient(t, tc)
	ctx := ctxT(t)
	groups := len(tc.nodes[0].svc.Groups())
	const doc = "prim/doc"
	lk := ""
	for i := 0; lk == ""; i++ {
		if k := fmt.Sprintf("prim/lk-%d", i); wire.GroupOf(wire.KeyHash("ns", k), groups) == wire.GroupOf(wire.KeyHash("ns", doc), groups) {
			lk = k
		}
	}

	rw := c1.RWMutex(doc, client.TTL(10*time.Second), client.AutoRenew())
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	readTok := rw.Reader().Token()
	if readTok == 0 {
		t.Fatal("no token after the downgrade")
	}
	writer := c2.RWMutex(doc, client.TTL(10*time.Second))
	wrote := make(chan error, 1)
	go func() { wrote <- writer.Lock(ctx) }()
	waitFor(t, "the writer queued", func() bool {
		st, err := c2.State(ctx, doc)
		return err == nil && st.QueueLen == 1
	})
	m := c1.Mutex(lk, client.TTL(10*time.Second), client.AutoRenew())
	l := m.Locker()
	l.Lock()
	lkTok := m.Token()

	victim := keyMaster(t, tc, doc)
	tc.stop(victim)
	waitFor(t, "a new master for the keys' group", func() bool {
		for i, s := range tc.nodes {
			if s != nil && i != victim && s.svc.Group(group.ID(wire.GroupOf(wire.KeyHash("ns", doc), groups))).Serving() {
				return true
			}
		}
		return false
	})

	// The queue of waiters is the master's memory, not replicated state:
	// the writer's client re-sends its blocked acquire to the new master
	// when it learns of the change, so the queue is waited for, the hold
	// is not.
	var st client.State
	waitFor(t, "the writer re-queued on the new master", func() bool {
		var err error
		st, err = c2.State(ctx, doc)
		return err == nil && st.QueueLen == 1
	})
	if !st.Held || st.Kind != wire.KindRead || st.Readers != 1 || st.Token != readTok || st.Holder != rw.Reader().Owner() || st.QueueLen != 1 {
		t.Fatalf("downgraded lock on the new master: %+v (want read hold with token %d and one queued writer)", st, readTok)
	}
	select {
	case err := <-wrote:
		t.Fatalf("the writer was granted while the read hold stands: %v", err)
	default:
	}
	if st, err := c2.State(ctx, lk); err != nil || !st.Held || st.Token != lkTok || st.Holder != m.Owner() {
		t.Fatalf("Locker's lock on the new master: %+v, %v (want token %d)", st, err, lkTok)
	}
	page, err := c2.List(ctx, "prim/", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Locks) != 2 || page.Locks[0].Key != doc || page.Locks[1].Key != lk || page.Locks[0].Token != readTok || page.Locks[1].Token != lkTok {
		t.Fatalf("List after the master change: %+v", page.Locks)
	}

	if err := rw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the writer after the read hold went: %v", err)
	}
	if tok := writer.Writer().Token(); tok <= readTok {
		t.Fatalf("writer's token %d, not above the downgraded hold's %d", tok, readTok)
	}
	l.Unlock()
	if st, err := c2.State(ctx, lk); err != nil || st.Held {
		t.Fatalf("after the Locker's Unlock: %+v, %v", st, err)
	}
	if err := writer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	tc.start(victim)
}
