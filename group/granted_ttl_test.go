package group

import (
	"testing"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// TestGrantedCarriesEffectiveTTL checks that a queued grant's push tells
// the waiter the TTL the master applied: the requested TTL clamped to
// MaxTTL, or DefaultTTL when none was asked for. (The client counts the
// lock's validity with it; the requested TTL may be longer than the
// server's deadline.)
func TestGrantedCarriesEffectiveTTL(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{MinTTL: time.Second, DefaultTTL: 4 * time.Second, MaxTTL: 10 * time.Second})
	a, b := newSink(), newSink()
	tok := c.do(a, Request{Op: OpAcquire, Key: "k", Owner: owner(1, 1), TTL: 30 * time.Second})
	if tok.Status != wire.StatusSuccess || tok.TTLLeftMs != 10000 {
		t.Fatalf("direct acquire of 30s with max_ttl 10s: %+v", tok)
	}
	waits := []struct {
		id   uint64
		ttl  time.Duration
		want uint32
	}{
		{7, 30 * time.Second, 10000}, // clamped to MaxTTL
		{8, 0, 4000},                 // the server's DefaultTTL
		{9, 2500 * time.Millisecond, 2500},
	}
	held := owner(1, 1)
	token := tok.Token
	for i, w := range waits {
		o := owner(2, uint64(i+1))
		if r := c.do(b, Request{Op: OpAcquire, Key: "k", Owner: o, TTL: w.ttl, MaxWait: -1, WaitID: w.id}); r.Status != wire.StatusLockWait {
			t.Fatalf("blocking acquire %d: %+v", w.id, r)
		}
		if r := c.do(a, Request{Op: OpRelease, Key: "k", Owner: held, Token: token}); r.Status != wire.StatusSuccess {
			t.Fatalf("release: %+v", r)
		}
		g := b.granted(t, w.id)
		if g.Status != wire.StatusSuccess || g.TTLMs != w.want {
			t.Fatalf("wait %d asking %v: granted %+v, want TTLMs %d", w.id, w.ttl, g, w.want)
		}
		held, token, a = o, g.Token, b
	}
}
