package group

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// groupKeys returns n keys of namespace "ns" in group g, spread over
// distinct workers where the worker count allows.
func groupKeys(t *testing.T, g, groups, workers, n int) []string {
	t.Helper()
	var out []string
	used := map[int]bool{}
	for i := 0; len(out) < n && i < 100000; i++ {
		k := fmt.Sprintf("mk%d", i)
		h := wire.KeyHash("ns", k)
		if wire.GroupOf(h, groups) != g {
			continue
		}
		if w := wire.WorkerOf(h, workers); !used[w] || len(used) >= workers {
			used[w] = true
			out = append(out, k)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d keys of group %d", len(out), g)
	}
	return out
}

// doMulti submits a multi-acquire of keys (owner i+1 of client cl for
// key i) to their group's master and returns its answer.
func (c *fakeCluster) doMulti(s *testSink, cl uint64, ttl time.Duration, value string, keys ...string) wire.Response {
	c.t.Helper()
	mk := make([]MultiKey, len(keys))
	for i, k := range keys {
		mk[i] = MultiKey{Key: k, Owner: owner(cl, uint64(i+1))}
	}
	c.reqID++
	r := &Request{Namespace: "ns", ReqID: c.reqID, Sink: s, TTL: ttl, Value: value}
	c.master("ns", keys[0]).SubmitMulti(r, mk)
	s.mu.Lock()
	resp, ok := s.resps[r.ReqID]
	s.mu.Unlock()
	if !ok {
		c.t.Fatalf("multi-acquire of %v was not answered", keys)
	}
	return resp
}

// TestMultiAcquireAllOrNone: keys of one group on different workers are
// granted in one command, each with the command's token; a multi-acquire
// one of whose keys is held, or has waiters, takes none of them and names
// that key. Followers apply the same command to the same table, and a
// checkpoint reloads it.
func TestMultiAcquireAllOrNone(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	keys := groupKeys(t, 0, 15, 8, 5)
	a, b := newSink(), newSink()
	fg := c.fgs[0]
	before := fg.submitted
	r := c.doMulti(a, 1, 10*time.Second, "job 7", keys[0], keys[1], keys[2])
	if r.Status != wire.StatusSuccess || len(r.Tokens) != 3 || r.Token == 0 || r.TTLLeftMs != 10000 {
		t.Fatalf("multi-acquire: %+v", r)
	}
	if got := fg.submitted - before; got != 1 {
		t.Fatalf("%d proposals for one multi-acquire, want 1", got)
	}
	for i, k := range keys[:3] {
		if r.Tokens[i] != r.Token {
			t.Fatalf("tokens %v: one command's tokens differ", r.Tokens)
		}
		st := c.state(k)
		if st.Status != wire.StatusSuccess || st.Holder != owner(1, uint64(i+1)) || st.Token != r.Token || st.Value != "job 7" {
			t.Fatalf("state of %s: %+v", k, st)
		}
	}
	// One key held: none is taken, and the answer names it.
	r2 := c.doMulti(b, 2, 0, "", keys[3], keys[2], keys[4])
	if r2.Status != wire.StatusLockOccupied || r2.KeyIndex != 1 || r2.Holder != owner(1, 3) || r2.Token != r.Token {
		t.Fatalf("multi-acquire with a held key: %+v", r2)
	}
	for _, k := range []string{keys[3], keys[4]} {
		if st := c.state(k); st.Status != wire.StatusLockDeleted {
			t.Fatalf("%s taken by a refused multi-acquire: %+v", k, st)
		}
	}
	// A retry by the same owners reacquires: same tokens.
	if r3 := c.doMulti(a, 1, 10*time.Second, "job 7", keys[0], keys[1], keys[2]); r3.Status != wire.StatusSuccess || !reflect.DeepEqual(r3.Tokens, r.Tokens) {
		t.Fatalf("retried multi-acquire: %+v, first %v", r3, r.Tokens)
	}
	// Every key is then its own lock: release one, renew another.
	if rr := c.do(a, Request{Op: OpRelease, Key: keys[0], Owner: owner(1, 1), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", rr)
	}
	if rr := c.do(a, Request{Op: OpRenew, Key: keys[1], Owner: owner(1, 2), Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("renew: %+v", rr)
	}
	// A key that is free but has a queue: the holder of keys[1] is
	// waited for by owner (3,1); after... keys[2]'s release a waiter on
	// it gets it; a multi-acquire on keys[1] never overtakes the waiter.
	if rw := c.do(b, Request{Op: OpAcquire, Key: keys[1], Owner: owner(3, 1), MaxWait: -1, WaitID: 5}); rw.Status != wire.StatusLockWait {
		t.Fatalf("wait: %+v", rw)
	}
	r4 := c.doMulti(b, 4, 0, "", keys[0], keys[1])
	if r4.Status != wire.StatusLockOccupied || r4.KeyIndex != 1 || r4.QueueLen != 1 {
		t.Fatalf("multi-acquire of a queued key: %+v", r4)
	}
	if st := c.state(keys[0]); st.Status != wire.StatusLockDeleted {
		t.Fatalf("%s taken by a refused multi-acquire: %+v", keys[0], st)
	}
	// Followers hold the same table, and a checkpoint reloads it.
	var tables []map[string]mLock
	for _, rep := range fg.replicas {
		tables = append(tables, dumpSM(rep.sm))
	}
	for i := 1; i < len(tables); i++ {
		if !reflect.DeepEqual(tables[0], tables[i]) {
			t.Fatalf("replica %d differs:\n%v\n%v", i+1, tables[i], tables[0])
		}
	}
	rep := fg.replicas[1]
	rep.sm.Checkpoint(rep.kv)
	sm2 := NewStateMachine(8)
	if err := sm2.Load(rep.kv.clone(), rep.sm.Applied()); err != nil {
		t.Fatal(err)
	}
	if got := dumpSM(sm2); !reflect.DeepEqual(got, tables[0]) {
		t.Fatalf("reloaded table differs:\n%v\n%v", got, tables[0])
	}
}

// TestMultiAcquireWaitsForChangeInFlight: a multi-acquire that finds one
// of its keys with a change in flight waits for it (the key is not taken
// half-way): here the change grants the key to a waiter, so the
// multi-acquire is refused and has taken nothing.
func TestMultiAcquireWaitsForChangeInFlight(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	keys := groupKeys(t, 0, 15, 8, 2)
	a, b := newSink(), newSink()
	r := c.do(a, Request{Op: OpAcquire, Key: keys[1], Owner: owner(1, 1)})
	if rw := c.do(b, Request{Op: OpAcquire, Key: keys[1], Owner: owner(2, 1), MaxWait: -1, WaitID: 9}); rw.Status != wire.StatusLockWait {
		t.Fatalf("wait: %+v", rw)
	}
	fg := c.fgs[0]
	fg.auto = false
	c.reqID++
	rel := &Request{Op: OpRelease, Namespace: "ns", Key: keys[1], Hash: wire.KeyHash("ns", keys[1]), Owner: owner(1, 1), Token: r.Token, ReqID: c.reqID, Sink: a}
	c.master("ns", keys[1]).Submit(rel) // held: in flight
	c.reqID++
	m := &Request{Namespace: "ns", ReqID: c.reqID, Sink: b}
	c.master("ns", keys[0]).SubmitMulti(m, []MultiKey{{keys[0], owner(3, 1)}, {keys[1], owner(3, 2)}})
	if fg.pending() != 1 {
		t.Fatalf("%d proposals pending, want the release alone", fg.pending())
	}
	fg.chooseAll()
	fg.auto = true
	resp := b.response(t, m.ReqID)
	if resp.Status != wire.StatusLockOccupied || resp.KeyIndex != 1 || resp.Holder != owner(2, 1) {
		t.Fatalf("multi-acquire after the grant: %+v", resp)
	}
	if st := c.state(keys[0]); st.Status != wire.StatusLockDeleted {
		t.Fatalf("%s taken: %+v", keys[0], st)
	}
	// Nothing is left reserved: the key can be taken.
	if r2 := c.do(b, Request{Op: OpAcquire, Key: keys[0], Owner: owner(3, 1)}); r2.Status != wire.StatusSuccess {
		t.Fatalf("acquire after the refusal: %+v", r2)
	}
}

// TestMultiAcquireWatchAndExpiry: watchers of every key hear the grant
// with its token, and each key expires on its own TTL with its holder
// told, as a single lock.
func TestMultiAcquireWatchAndExpiry(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 3, Config{Clock: fc})
	keys := groupKeys(t, 0, 15, 8, 3)
	a, ws := newSink(), newSink()
	for i, k := range keys {
		if r := c.do(ws, watchReq(k, uint64(i+1), 0, 0, 0)); r.Status != wire.StatusSuccess {
			t.Fatalf("watch: %+v", r)
		}
	}
	r := c.doMulti(a, 1, 5*time.Second, "v", keys...)
	if r.Status != wire.StatusSuccess {
		t.Fatalf("multi-acquire: %+v", r)
	}
	for i := range keys {
		wantEvent(t, ws.waitWatch(t, uint64(i+1), 1)[0], wire.EventAcquired, r.Tokens[i], owner(1, uint64(i+1)))
	}
	// Renew one key; the others expire.
	fc.Advance(4 * time.Second)
	if rr := c.do(a, Request{Op: OpRenew, Key: keys[0], Owner: owner(1, 1), Token: r.Tokens[0]}); rr.Status != wire.StatusSuccess {
		t.Fatalf("renew: %+v", rr)
	}
	advanceUntil(t, fc, 500*time.Millisecond, "the unrenewed keys to expire", func() bool {
		return c.state(keys[1]).Status == wire.StatusLockDeleted && c.state(keys[2]).Status == wire.StatusLockDeleted
	})
	if st := c.state(keys[0]); st.Status != wire.StatusSuccess {
		t.Fatalf("renewed key: %+v", st)
	}
	if n := a.count(isLost(r.Tokens[1])); n < 2 {
		t.Fatalf("%d Lost pushes for the expired keys, want 2", n)
	}
}

// TestMultiAcquireMasterChange: a multi-acquire whose command is still
// in flight when the master's node stops is either applied whole or not
// at all on the new master; a retry there by the same owners gets the
// same state, and no key is granted twice.
func TestMultiAcquireMasterChange(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	keys := groupKeys(t, 0, 15, 8, 3)
	a := newSink()
	fg := c.fgs[0]
	fg.auto = false
	c.reqID++
	m := &Request{Namespace: "ns", ReqID: c.reqID, Sink: a}
	mk := []MultiKey{{keys[0], owner(1, 1)}, {keys[1], owner(1, 2)}, {keys[2], owner(1, 3)}}
	c.master("ns", keys[0]).SubmitMulti(m, mk)
	p := fg.applyNext() // chosen on every replica, not answered yet
	if p == nil {
		t.Fatal("no proposal")
	}
	c.takeOver(0, true)
	p.answer()
	fg.auto = true
	// The new master learnt the holds from the log.
	r := c.doMulti(a, 1, 0, "", keys...)
	if r.Status != wire.StatusSuccess {
		t.Fatalf("retry on the new master: %+v", r)
	}
	for i, k := range keys {
		if st := c.state(k); st.Holder != owner(1, uint64(i+1)) || st.Token != r.Tokens[i] {
			t.Fatalf("state of %s: %+v", k, st)
		}
	}
	// The keys are not free to anyone else.
	if r2 := c.doMulti(newSink(), 2, 0, "", keys[1]); r2.Status != wire.StatusLockOccupied {
		t.Fatalf("second grant: %+v", r2)
	}
}

// TestMultiAcquireParkedAcrossMasterChange: a multi-acquire that reserved
// one key and waits for a change in flight on another is answered
// NO_MASTER when the mastership moves, and leaves nothing reserved or
// held: the new master grants the keys to whoever asks.
func TestMultiAcquireParkedAcrossMasterChange(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{})
	keys := groupKeys(t, 0, 15, 8, 2)
	// keys[1] comes second in the reservation order (its worker's index
	// is higher), so keys[0] is reserved when keys[1] parks it.
	w := func(k string) int { return wire.WorkerOf(wire.KeyHash("ns", k), 8) }
	if w(keys[0]) > w(keys[1]) {
		keys[0], keys[1] = keys[1], keys[0]
	}
	a, b := newSink(), newSink()
	r := c.do(a, Request{Op: OpAcquire, Key: keys[1], Owner: owner(1, 1)})
	fg := c.fgs[0]
	fg.auto = false
	c.reqID++
	c.master("ns", keys[1]).Submit(&Request{Op: OpRelease, Namespace: "ns", Key: keys[1], Hash: wire.KeyHash("ns", keys[1]), Owner: owner(1, 1), Token: r.Token, ReqID: c.reqID, Sink: a})
	c.reqID++
	m := &Request{Namespace: "ns", ReqID: c.reqID, Sink: b}
	c.master("ns", keys[0]).SubmitMulti(m, []MultiKey{{keys[0], owner(3, 1)}, {keys[1], owner(3, 2)}})
	if st := c.state(keys[0]); st.Status != wire.StatusLockDeleted {
		t.Fatalf("%s held while reserved: %+v", keys[0], st)
	}
	c.takeOver(0, false)
	if resp := b.response(t, m.ReqID); resp.Status != wire.StatusNoMaster {
		t.Fatalf("parked multi-acquire after the master change: %+v", resp)
	}
	fg.chooseAll() // the release, answered to the old master
	fg.auto = true
	r2 := c.doMulti(newSink(), 4, 0, "", keys[0], keys[1])
	if r2.Status != wire.StatusSuccess {
		t.Fatalf("multi-acquire on the new master: %+v", r2)
	}
}
