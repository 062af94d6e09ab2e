package lockservice

import (
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// TestForceRelease: an operator's force-unlock removes the holds there
// were when it started — the holder hears EventRevoked, watchers too —
// and hands the key on to its waiter, whose new hold it leaves alone.
func TestForceRelease(t *testing.T) {
	ctx := t.Context()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "stuck"
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	ws := newSink()
	if w := c.do(ws, Request{Op: OpWatch, Key: key, WatchID: 7, Token: r.Token, Flags: wire.FlagContinuous, MaxWait: -1}); w.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", w)
	}
	waiter := &waiterSpec{owner: owner(2, 1), waitID: 2}
	enqueue(t, c, key, waiter)

	got, err := c.master("ns", key).ForceRelease(ctx, "ns", key)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Owner != owner(1, 1) || got[0].Token != r.Token {
		t.Fatalf("ForceRelease removed %+v, want the hold of %v with token %d", got, owner(1, 1), r.Token)
	}
	hs.push(t, "Lost EventRevoked", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Key == key && l.Token == r.Token && l.Event == wire.EventRevoked
	})
	evs := ws.waitWatch(t, 7, 1)
	if evs[0].Event != wire.EventRevoked {
		t.Fatalf("watch event %+v, want EventRevoked", evs[0])
	}
	g := waiter.sink.granted(t, waiter.waitID)
	if g.Status != wire.StatusSuccess || g.Token <= r.Token {
		t.Fatalf("waiter after the force release: %+v", g)
	}
	if st := c.state(key); st.Holder != waiter.owner {
		t.Fatalf("holder after the force release: %+v", st)
	}
	// The waiter's hold is new; the old holder's release finds nothing.
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r.Token}); rr.Status == wire.StatusSuccess {
		t.Fatalf("release by the revoked holder: %+v", rr)
	}
	// A free key: nothing to do.
	if got, err := c.master("ns", "free").ForceRelease(ctx, "ns", "free"); err != nil || len(got) != 0 {
		t.Fatalf("ForceRelease of a free key: %+v, %v", got, err)
	}
	// A node that does not serve the group says so.
	for _, id := range c.peers {
		svc := c.svc(id)
		if svc == c.master("ns", key) {
			continue
		}
		if _, err := svc.ForceRelease(ctx, "ns", key); !errors.Is(err, ErrNotMaster) {
			t.Fatalf("ForceRelease on node %d (not master): %v, want ErrNotMaster", id, err)
		}
		break
	}
	// Several readers: all go.
	for i := range 3 {
		if rr := c.do(newSink(), Request{Op: OpAcquire, Key: "read", Owner: owner(10+uint64(i), 1), Kind: wire.KindRead, TTL: time.Hour}); rr.Status != wire.StatusSuccess {
			t.Fatalf("read acquire %d: %+v", i, rr)
		}
	}
	if got, err := c.master("ns", "read").ForceRelease(ctx, "ns", "read"); err != nil || len(got) != 3 {
		t.Fatalf("ForceRelease of 3 readers: %+v, %v", got, err)
	}
	if st := c.state("read"); st.Holder != (wire.Owner{}) || st.Readers != 0 {
		t.Fatalf("read lock after the force release: %+v", st)
	}
}
