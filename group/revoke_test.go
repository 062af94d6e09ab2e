package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestRevokeClient: revoking (client, connection) tells the connection
// that its client's wait failed (Granted AUTH_FAILED) and that its holds
// are revoked (Lost EventRevoked), tells another connection nothing, and
// then forgets the client's waits and watches over it as ForgetClient
// does; done runs once every worker has done so. The holds stay in the
// table.
func TestRevokeClient(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	const key, other = "rk", "rk-other"
	hs, s := newSink(), newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(9, 1), TTL: 5 * time.Second})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	held := c.do(s, Request{Op: OpAcquire, Key: other, Owner: owner(1, 1), TTL: 5 * time.Second})
	if held.Status != wire.StatusSuccess {
		t.Fatalf("acquire other: %+v", held)
	}
	if rr := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(1, 2), MaxWait: -1, WaitID: 1}); rr.Status != wire.StatusLockWait {
		t.Fatalf("wait: %+v", rr)
	}
	if rr := c.do(s, Request{Op: OpWatch, Key: key, WatchID: 5, Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", rr)
	}
	for _, k := range []string{key, other} {
		done := make(chan struct{})
		c.master("ns", k).RevokeClient(1, "ns", s, func() { close(done) })
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("RevokeClient's done was not called")
		}
	}
	if g := s.granted(t, 1); g.Status != wire.StatusAuthFailed || g.Owner != owner(1, 2) || g.Key != key {
		t.Fatalf("the revoked wait was told %+v, want AUTH_FAILED", g)
	}
	s.wait(t, "the revoked hold's Lost", func() bool {
		for _, m := range s.pushes {
			if l, ok := m.(*wire.Lost); ok && l.Key == other && l.Token == held.Token && l.Owner == owner(1, 1) && l.Event == wire.EventRevoked {
				return true
			}
		}
		return false
	})
	if hs.count(isLost(r.Token)) != 0 {
		t.Fatal("another connection's hold was told it was lost")
	}
	if st := c.state(key); st.QueueLen != 0 || st.Token != r.Token {
		t.Fatalf("after the revocation: %+v, want the first holder and no waiter", st)
	}
	if st := c.state(other); st.Status != wire.StatusSuccess || st.Token != held.Token {
		t.Fatalf("the revoked hold left the table: %+v", st)
	}
	// The forgotten watch hears nothing of the release.
	if rr := c.do(hs, Request{Op: OpRelease, Key: key, Owner: owner(9, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	c.state(key)
	if n := len(s.watchEvents(5)); n != 0 {
		t.Fatalf("a revoked watch had %d events", n)
	}
}

// TestRevokeClientAfterMasterChange: a namespace revocation reaches a
// holder whose hold was granted under another master (the new master
// knows no connection of it) through the revoked connection of its
// client, at once, not when its validity runs out; the client's hold in
// another namespace is not told.
func TestRevokeClientAfterMasterChange(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Clock: newFakeClock()})
	const key = "ns-moved"
	g := wire.GroupOf(wire.KeyHash("ns", key), c.groups)
	hs := newSink()
	r := c.do(hs, Request{Op: OpAcquire, Key: key, Owner: owner(4, 1), TTL: time.Hour})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r)
	}
	// The same client's hold in another namespace of the same group.
	var okey string
	for i := 0; okey == ""; i++ {
		if k := fmt.Sprintf("other-%d", i); wire.GroupOf(wire.KeyHash("ns2", k), c.groups) == g {
			okey = k
		}
	}
	o := c.do(hs, Request{Op: OpAcquire, Namespace: "ns2", Key: okey, Owner: owner(4, 2), TTL: time.Hour})
	if o.Status != wire.StatusSuccess {
		t.Fatalf("acquire in ns2: %+v", o)
	}
	next := c.takeOver(g, false)
	cs := newSink()
	c.svc(next).AttachClient(4, cs)
	done := make(chan struct{})
	c.svc(next).RevokeClient(4, "ns", cs, func() { close(done) })
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("RevokeClient's done was not called")
	}
	cs.push(t, "Lost EventRevoked for the hold granted under the previous master", func(m wire.Message) bool {
		l, ok := m.(*wire.Lost)
		return ok && l.Key == key && l.Token == r.Token && l.Owner == owner(4, 1) && l.Event == wire.EventRevoked
	})
	if n := cs.count(isLost(o.Token)); n != 0 {
		t.Fatal("a hold in another namespace was told it was revoked")
	}
}
