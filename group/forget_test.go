package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestForgetClientByConnection: forgetting (client, connection) drops that
// client's waits and every watch over the connection, keeps another
// client's wait over the same connection, stops the Lost of the holds
// taken over it but not of holds taken over it afterwards, and leaves the
// workers' by-connection indexes empty.
func TestForgetClientByConnection(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key, other = "fk", "fk-other"
	hs, s := newSink(), newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(9, 1), TTL: 5 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	// Over connection s: a held lock, client 1's wait, client 2's wait
	// (a connection that said Hello again) and a watch.
	held := c.do(s, Request{Op: OpAcquire, Key: other, Owner: owner(1, 1), TTL: 5 * time.Second})
	if held.Status != wire.StatusSuccess {
		t.Fatalf("acquire other: %+v", held)
	}
	if rr := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(1, 2), MaxWait: -1, WaitID: 1}); rr.Status != wire.StatusLockWait {
		t.Fatalf("wait 1: %+v", rr)
	}
	if rr := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), MaxWait: -1, WaitID: 2}); rr.Status != wire.StatusLockWait {
		t.Fatalf("wait 2: %+v", rr)
	}
	if rr := c.do(s, Request{Op: OpWatch, Key: key, WatchID: 5, Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", rr)
	}
	if st := c.state(key); st.QueueLen != 2 {
		t.Fatalf("queue %d, want 2", st.QueueLen)
	}
	c.master("ns", key).ForgetClient(1, s)
	c.master("ns", other).ForgetClient(1, s)
	if st := c.state(key); st.QueueLen != 1 {
		t.Fatalf("after forget: queue %d, want 1 (client 2's wait)", st.QueueLen)
	}
	// Over the same connection after the forget: a hold that is told
	// when it is lost.
	later := c.do(s, Request{Op: OpAcquire, Key: "fk-later", Owner: owner(2, 2), TTL: 5 * time.Second})
	if later.Status != wire.StatusSuccess {
		t.Fatalf("acquire later: %+v", later)
	}
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(9, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	g := s.granted(t, 2)
	if g.Status != wire.StatusSuccess || g.Owner != owner(2, 1) {
		t.Fatalf("granted %+v, want client 2's wait", g)
	}
	if s.count(isGranted(1)) != 0 {
		t.Fatal("a forgotten wait was granted")
	}
	if n := len(s.watchEvents(5)); n != 0 {
		t.Fatalf("a forgotten watch had %d events", n)
	}
	lost := func(k string, tok uint64) func(wire.Message) bool {
		return func(m wire.Message) bool {
			l, ok := m.(*wire.Lost)
			return ok && l.Key == k && l.Token == tok
		}
	}
	advanceUntil(t, fc, 10*time.Millisecond, "the later hold to expire", func() bool { return s.count(lost("fk-later", later.Token)) > 0 })
	advanceUntil(t, fc, 10*time.Millisecond, "the earlier hold to expire", freed(c, other))
	c.state(other)
	if s.count(lost(other, held.Token)) != 0 {
		t.Fatal("a hold taken before the forget was told it was lost")
	}
	// Everything over s ended or was forgotten: the indexes are empty.
	// The cluster is quiet (the fake clock stands still), so every worker
	// is idle; its lock orders the read after its last run.
	svc := c.master("ns", key)
	for _, lg := range svc.groups {
		for _, w := range lg.workers {
			w.mu.Lock()
			running, waits, watches := w.running, len(w.waits), len(w.watching)
			w.mu.Unlock()
			if !running && (waits != 0 || watches != 0) {
				t.Fatalf("group %d worker %d: by-connection index left: %d waits, %d watches", lg.id, w.idx, waits, watches)
			}
		}
	}
}
