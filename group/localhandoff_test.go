package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// TestReleaseHandOff: a release with HandOff grants the key to the same
// client's next owner in one command, with a higher token, when nobody
// is queued; a retry of an applied hand-off gets the same answer; with a
// waiter queued the release only releases and the waiter is granted.
func TestReleaseHandOff(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "local"
	s := newSink()
	a, b, d := owner(7, 1), owner(7, 2), owner(7, 3)
	r := c.do(s, Request{Op: OpAcquire, Key: key, Owner: a, TTL: 20 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	rel := Request{Op: OpRelease, Key: key, Owner: a, Token: r.Token, HandOff: b, TTL: 5 * time.Second, Value: "b"}
	h := c.do(s, rel)
	if h.Status != wire.StatusSuccess || h.Holder != b || h.Token <= r.Token || h.TTLLeftMs != 5000 {
		t.Fatalf("hand-off: %+v, previous token %d", h, r.Token)
	}
	if st := c.state(key); st.Holder != b || st.Token != h.Token || st.Value != "b" {
		t.Fatalf("state after hand-off: %+v", st)
	}
	// The same request again (a retry after a lost answer).
	if again := c.do(s, rel); again.Status != wire.StatusSuccess || again.Holder != b || again.Token != h.Token {
		t.Fatalf("retried hand-off: %+v, want holder %v token %d", again, b, h.Token)
	}
	// A remote waiter queues; b's hand-off to d must not pass it.
	w := &waiterSpec{owner: owner(9, 1), waitID: 99}
	enqueue(t, c, key, w)
	nh := c.do(s, Request{Op: OpRelease, Key: key, Owner: b, Token: h.Token, HandOff: d, TTL: 5 * time.Second})
	if nh.Status != wire.StatusSuccess || !nh.Holder.IsZero() {
		t.Fatalf("release with a queued waiter: %+v, want a plain release", nh)
	}
	g := w.sink.granted(t, w.waitID)
	if g.Status != wire.StatusSuccess || g.Owner != w.owner || g.Token <= h.Token {
		t.Fatalf("queued waiter: %+v", g)
	}
	if st := c.state(key); st.Holder != w.owner {
		t.Fatalf("state: %+v, want the queued waiter holding", st)
	}
}
