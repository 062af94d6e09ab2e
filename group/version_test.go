package group

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestRaiseVersion: a group version raised through Paxos
// (Group.RaiseVersion, opSetVersion) reaches every replica, and the next
// grant's token carries it (groupVersion<<48 | instance) on every
// replica, above every token before. A lower version changes nothing; a
// version beyond MaxGroupVersion is refused before anything is proposed;
// a node that does not serve the group answers ErrNotMaster.
func TestRaiseVersion(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const key = "versioned"
	g := c.groupOf(key)
	master, svc := c.groupMaster(ID(g))
	s := newSink()
	r1 := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(1, 1), TTL: time.Minute})
	if r1.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", r1)
	}
	if v, _ := wire.SplitToken(r1.Token); v != 0 {
		t.Fatalf("token %#x before any raise has group version %d", r1.Token, v)
	}
	got, err := svc.Group(ID(g)).RaiseVersion(ctx, 7)
	if err != nil || got != 7 {
		t.Fatalf("RaiseVersion(7) = %d, %v", got, err)
	}
	for _, r := range c.fgs[g].replicas {
		if v := r.sm.Version(); v != 7 {
			t.Fatalf("node %d: group version %d after the raise, want 7", r.node, v)
		}
	}
	if r := c.do(s, Request{Op: OpRelease, Key: key, Owner: owner(1, 1), Token: r1.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	r2 := c.do(s, Request{Op: OpAcquire, Key: key, Owner: owner(2, 1), TTL: time.Minute})
	if r2.Status != wire.StatusSuccess {
		t.Fatalf("acquire after the raise: %+v", r2)
	}
	if v, inst := wire.SplitToken(r2.Token); v != 7 || inst == 0 || r2.Token <= r1.Token {
		t.Fatalf("token after the raise %#x (version %d, instance %d), before %#x", r2.Token, v, inst, r1.Token)
	}
	full := fullKey("ns", key)
	for _, r := range c.fgs[g].replicas {
		rec := r.sm.get(full)
		if rec.n() != 1 || rec.at(0).token != r2.Token {
			t.Fatalf("node %d holds %d holds of %s, token %#x; want the master's %#x", r.node, rec.n(), key, rec.at(0).token, r2.Token)
		}
	}
	// Lower: nothing changes.
	if got, err := svc.Group(ID(g)).RaiseVersion(ctx, 3); err != nil || got != 7 {
		t.Fatalf("RaiseVersion(3) after 7 = %d, %v; want 7", got, err)
	}
	// Beyond the 16 bits a token has for it: refused, nothing proposed.
	before := c.fgs[g].submitted
	if _, err := svc.Group(ID(g)).RaiseVersion(ctx, MaxGroupVersion+1); !errors.Is(err, ErrVersionRange) {
		t.Fatalf("RaiseVersion(MaxGroupVersion+1): %v, want ErrVersionRange", err)
	}
	if c.fgs[g].submitted != before {
		t.Fatal("an out-of-range version was proposed")
	}
	// Not the master.
	for _, id := range c.peers {
		if id != master {
			if _, err := c.svcs[id].Group(ID(g)).RaiseVersion(ctx, 9); !errors.Is(err, ErrNotMaster) {
				t.Fatalf("RaiseVersion on node %d, not the master: %v, want ErrNotMaster", id, err)
			}
			break
		}
	}
}

// TestSetVersionBeyondRangeApplied: an opSetVersion beyond
// MaxGroupVersion (which RaiseVersion never proposes) is applied as an
// error on every replica alike and leaves the version as it was, so no
// token's version bits overflow.
func TestSetVersionBeyondRangeApplied(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	if out := r.apply(1, command{op: opSetVersion, token: 5}); out.status != wire.StatusSuccess || r.sm.Version() != 5 {
		t.Fatalf("raise to 5: %+v, version %d", out, r.sm.Version())
	}
	if out := r.apply(2, command{op: opSetVersion, token: MaxGroupVersion + 1}); out.status != wire.StatusBadRequest || r.sm.Version() != 5 {
		t.Fatalf("raise beyond MaxGroupVersion: %+v, version %d; want BAD_REQUEST and 5", out, r.sm.Version())
	}
	if out := r.apply(3, command{op: opSetVersion, token: MaxGroupVersion}); out.status != wire.StatusSuccess || r.sm.Version() != MaxGroupVersion {
		t.Fatalf("raise to MaxGroupVersion: %+v, version %d", out, r.sm.Version())
	}
}
