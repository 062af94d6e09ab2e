package e2e

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// The holder view's own tests: a checker that cannot fail is no checker.
// TestHolderViewChecker feeds it made-up histories; TestHolderViewLive
// runs holders against a real cluster, some with a belief broken on
// purpose, and wants the overlaps they cause reported.

// synthHold adds a hold to hv: owner o (of client 1) of key in kind,
// taken by hand with a 1 s TTL, its acquire called 1 ms before start,
// believed at start and at each of held.
func synthHold(hv *holderView, key string, kind holdKind, o uint64, start int64, held ...int64) *believedHold {
	return hv.begin(believedHold{key: key, kind: kind, permits: 1, owner: wire.Owner{Client: 1, ID: o}, worker: int(o), token: o * 10,
		ttl: time.Second, call: start - ms(1), start: start, held: append([]int64{start}, held...)})
}

// findings returns the kinds of what hv.check found on key.
func findings(hv *holderView, key string) []string {
	var out []string
	for _, f := range hv.check() {
		if f.key == key {
			out = append(out, f.kind)
		}
	}
	return out
}

func TestHolderViewChecker(t *testing.T) {
	hv := newHolderView(time.Now())
	hv.setTotal("sem", 2)
	hv.setTotal("sem-ok", 2)
	hv.setTotal("sem-21", 2)
	hv.setTotal("sem-later", 2)
	n := uint64(0)
	owner := func() uint64 { n++; return n }

	// Exclusive: A believed after B's acquire returned.
	synthHold(hv, "x-overlap", holdExclusive, owner(), ms(10), ms(50), ms(100))
	synthHold(hv, "x-overlap", holdExclusive, owner(), ms(60))
	// A's last belief before B's start; one exactly at it (not after).
	synthHold(hv, "x-apart", holdExclusive, owner(), ms(10), ms(50))
	synthHold(hv, "x-apart", holdExclusive, owner(), ms(60), ms(70))
	synthHold(hv, "x-touch", holdExclusive, owner(), ms(10), ms(60))
	synthHold(hv, "x-touch", holdExclusive, owner(), ms(60), ms(70))
	// B ended before A started: A's later samples are no overlap.
	synthHold(hv, "x-after", holdExclusive, owner(), ms(10), ms(20))
	synthHold(hv, "x-after", holdExclusive, owner(), ms(30), ms(100))
	// One owner's two holds (reentrant) do not conflict.
	o := owner()
	synthHold(hv, "x-same", holdExclusive, o, ms(10), ms(100))
	synthHold(hv, "x-same", holdExclusive, o, ms(60))

	// Read-write: readers share; a writer excludes either way.
	synthHold(hv, "rw-rr", holdRead, owner(), ms(10), ms(100))
	synthHold(hv, "rw-rr", holdRead, owner(), ms(60), ms(90))
	synthHold(hv, "rw-rw", holdRead, owner(), ms(10), ms(100))
	synthHold(hv, "rw-rw", holdWrite, owner(), ms(60))
	synthHold(hv, "rw-wr", holdWrite, owner(), ms(10), ms(100))
	synthHold(hv, "rw-wr", holdRead, owner(), ms(60))

	// Semaphore of 2 permits.
	synthHold(hv, "sem-ok", holdSemaphore, owner(), ms(10), ms(100))
	synthHold(hv, "sem-ok", holdSemaphore, owner(), ms(20), ms(100))
	synthHold(hv, "sem", holdSemaphore, owner(), ms(10), ms(100))
	synthHold(hv, "sem", holdSemaphore, owner(), ms(20), ms(100))
	synthHold(hv, "sem", holdSemaphore, owner(), ms(30), ms(40))
	synthHold(hv, "sem-21", holdSemaphore, owner(), ms(10), ms(100)).permits = 2
	synthHold(hv, "sem-21", holdSemaphore, owner(), ms(30))
	synthHold(hv, "sem-later", holdSemaphore, owner(), ms(10), ms(25))
	synthHold(hv, "sem-later", holdSemaphore, owner(), ms(20), ms(100))
	synthHold(hv, "sem-later", holdSemaphore, owner(), ms(30), ms(90))

	// Force-unlocks excuse nothing: a revoked holder must stop believing
	// before anyone else's acquire returns, whatever the answer. A hold
	// listed by a 200 answer must not be believed at a sample after the
	// answer returned; other answers (202, 503, none) claim nothing.
	revoke := func(key string, call, ret int64, status int, of ...*believedHold) {
		r := revocation{key: key, call: call, ret: ret, status: status, answer: "test"}
		for _, b := range of {
			r.released = append(r.released, revokedHold{owner: b.owner, token: b.token})
		}
		hv.revoked(r)
	}
	// Revoked (200) before B's acquire returned, A believed after both.
	a := synthHold(hv, "f-before", holdExclusive, owner(), ms(10), ms(100))
	synthHold(hv, "f-before", holdExclusive, owner(), ms(60))
	revoke("f-before", ms(40), ms(45), http.StatusOK, a)
	// The same, A's last belief before the answer: B's start after both.
	a = synthHold(hv, "f-stopped", holdExclusive, owner(), ms(10), ms(40))
	synthHold(hv, "f-stopped", holdExclusive, owner(), ms(60), ms(70))
	revoke("f-stopped", ms(30), ms(45), http.StatusOK, a)
	// A sample exactly at the answer's return is not after it.
	a = synthHold(hv, "f-touch", holdExclusive, owner(), ms(10), ms(45))
	revoke("f-touch", ms(30), ms(45), http.StatusOK, a)
	// Believed after the 200 answer, no one else took the key.
	a = synthHold(hv, "f-revoked", holdExclusive, owner(), ms(10), ms(50))
	a.auto = true
	revoke("f-revoked", ms(30), ms(45), http.StatusOK, a)
	// Answered after B's acquire returned: an overlap, and A believed
	// after the answer.
	a = synthHold(hv, "f-after", holdExclusive, owner(), ms(10), ms(100))
	synthHold(hv, "f-after", holdExclusive, owner(), ms(60))
	revoke("f-after", ms(70), ms(75), http.StatusOK, a)
	// The answer lists another hold: A's beliefs are only the overlap.
	synthHold(hv, "f-other", holdExclusive, owner(), ms(10), ms(100))
	c := synthHold(hv, "f-other", holdExclusive, owner(), ms(5), ms(6))
	synthHold(hv, "f-other", holdExclusive, owner(), ms(60))
	revoke("f-other", ms(40), ms(45), http.StatusOK, c)
	// 202 (pending), 503 and no answer list or not, claim nothing: the
	// overlap stands, the belief after the answer is no finding.
	a = synthHold(hv, "f-pending", holdExclusive, owner(), ms(10), ms(100))
	synthHold(hv, "f-pending", holdExclusive, owner(), ms(60))
	revoke("f-pending", ms(40), ms(45), http.StatusAccepted, a)
	a = synthHold(hv, "f-pending-alone", holdExclusive, owner(), ms(10), ms(100))
	revoke("f-pending-alone", ms(40), ms(45), http.StatusAccepted, a)
	synthHold(hv, "f-503", holdExclusive, owner(), ms(10), ms(100))
	synthHold(hv, "f-503", holdExclusive, owner(), ms(60))
	revoke("f-503", ms(40), ms(45), http.StatusServiceUnavailable)
	synthHold(hv, "f-lost", holdExclusive, owner(), ms(10), ms(100))
	synthHold(hv, "f-lost", holdExclusive, owner(), ms(60))
	revoke("f-lost", ms(40), forever, 0)
	// A semaphore's listing names its client and token, not the owner:
	// a finding only if every hold it may mean was believed after it.
	hv.setTotal("f-sem", 3)
	a = synthHold(hv, "f-sem", holdSemaphore, owner(), ms(10), ms(100))
	c = synthHold(hv, "f-sem", holdSemaphore, owner(), ms(10), ms(30))
	c.token = a.token
	revoke("f-sem", ms(35), ms(40), http.StatusOK, a)
	hv.setTotal("f-sem-both", 3)
	a = synthHold(hv, "f-sem-both", holdSemaphore, owner(), ms(10), ms(100))
	c = synthHold(hv, "f-sem-both", holdSemaphore, owner(), ms(10), ms(90))
	c.token = a.token
	revoke("f-sem-both", ms(35), ms(40), http.StatusOK, a)

	// Stale beliefs of holds renewed by hand: past the last successful
	// renewal's return plus its TTL, even a shorter one; an AutoRenew
	// hold has no bound.
	a = synthHold(hv, "s-renewed", holdExclusive, owner(), ms(10), ms(1000), ms(1100))
	a.renews = []renewal{{call: ms(100), ret: ms(110), ttl: time.Second, ok: true}}
	a = synthHold(hv, "s-stale", holdExclusive, owner(), ms(10), ms(1000), ms(1200))
	a.renews = []renewal{{call: ms(100), ret: ms(110), ttl: time.Second, ok: true}, {call: ms(150), ret: ms(155), ttl: time.Second, ok: true}}
	a.held = []int64{ms(10), ms(1000), ms(1160)}
	a = synthHold(hv, "s-shorter", holdExclusive, owner(), ms(10), ms(500), ms(2000))
	a.ttl = 3 * time.Second
	a.renews = []renewal{{call: ms(90), ret: ms(100), ttl: time.Second, ok: true}}
	a = synthHold(hv, "s-unknown", holdExclusive, owner(), ms(10), ms(1500))
	a.renews = []renewal{{call: ms(90), ret: ms(100), ttl: time.Second, ok: true}, {call: ms(200), ret: ms(400), ttl: 2 * time.Second}}
	a = synthHold(hv, "s-auto", holdExclusive, owner(), ms(10), ms(5000))
	a.auto = true

	// An overlap at an instant past the first holder's validity: both
	// findings, the overlap saying how far past.
	synthHold(hv, "x-stale", holdExclusive, owner(), ms(10), ms(1600))
	synthHold(hv, "x-stale", holdExclusive, owner(), ms(1500))

	// Held said held after Lost was seen closed.
	synthHold(hv, "inconsistent", holdExclusive, owner(), ms(10)).inconsistent = ms(20)

	want := map[string][]string{
		"x-overlap": {"overlap"}, "x-apart": nil, "x-touch": nil, "x-after": nil, "x-same": nil,
		"rw-rr": nil, "rw-rw": {"overlap"}, "rw-wr": {"overlap"},
		"sem-ok": nil, "sem": {"permits"}, "sem-21": {"permits"}, "sem-later": nil,
		"f-before": {"overlap", "revoked"}, "f-stopped": nil, "f-touch": nil, "f-revoked": {"revoked"},
		"f-after": {"overlap", "revoked"}, "f-other": {"overlap"},
		"f-pending": {"overlap"}, "f-pending-alone": nil, "f-503": {"overlap"}, "f-lost": {"overlap"},
		"f-sem": nil, "f-sem-both": {"revoked"},
		"s-renewed": nil, "s-stale": {"stale"}, "s-shorter": {"stale"}, "s-unknown": nil, "s-auto": nil,
		"x-stale": {"stale", "overlap"}, "inconsistent": {"inconsistent"},
	}
	for key, w := range want {
		got := findings(hv, key)
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: found %v, want %v", key, got, w)
		}
	}
	found := hv.check()
	for _, f := range found {
		if _, ok := want[f.key]; !ok {
			t.Errorf("finding on unexpected key: %s", f.text)
		}
	}

	// The verdict fails the run on every finding, and spells out who and
	// when.
	fail, st := hv.verdict(func(string, ...any) {})
	if st.findings != len(found) || st.revocations != 12 || st.exact != 8 || st.listed != 8 || st.pending != 2 {
		t.Errorf("stats: %v", st)
	}
	if len(fail) != len(found) {
		t.Errorf("verdict: %d failures, want %d: %q", len(fail), len(found), fail)
	}
	hv.notes = append(hv.notes, note{at: ms(1), msg: "kill -9 node 2"})
	for _, f := range hv.check() {
		if f.key == "x-overlap" && !(strings.Contains(f.text, "token 10") && strings.Contains(f.text, "token 20") && strings.Contains(f.text, "kill -9 node 2")) {
			t.Errorf("overlap report lacks the holders' tokens or the fault log: %s", f.text)
		}
		if f.key == "x-stale" && f.kind == "overlap" && !strings.Contains(f.text, "the first was 490ms past its validity bound then") {
			t.Errorf("overlap report past the first holder's validity does not say how far: %s", f.text)
		}
		if f.key == "f-revoked" && !(strings.Contains(f.text, "believed at 0.050s") && strings.Contains(f.text, "returned at 0.045s")) {
			t.Errorf("revoked report lacks the belief or the answer: %s", f.text)
		}
		if f.key == "f-before" && f.kind == "overlap" && !strings.Contains(f.text, `force-unlock of "f-before"`) {
			t.Errorf("overlap report does not quote the key's force-unlock: %s", f.text)
		}
	}
}

// TestHolderViewLive runs one holder A and a holder B that waits for A's
// key, against a 3-node cluster; B's acquire returns once the cluster
// gave the key away, and A then looks at its belief again. With a belief
// broken on purpose the checker must report the overlap (and whatever
// else the broken belief did: a belief past the holder's validity, or
// after a force-unlock's 200 answer); with the real client's belief it
// must report nothing. The cases: A stops renewing (a belief that ignores
// Held and Lost; one that counts the validity from when the holder got
// round to reading the renewal's answer); a semaphore; a force-unlock of
// A while B waits (the revocation path: A's client must have marked the
// hold lost before B is granted); and a shorter Renew after which the
// key's master is paused (a belief that, like the client before the fix,
// ignores the shorter TTL).
func TestHolderViewLive(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the holder view against a cluster")
	}
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	clA, clB := c.newClient(ctx), c.newClient(ctx)
	defer clA.Close()
	defer clB.Close()
	lt := &liveTest{t: t, c: c, hv: newHolderView(time.Now()), clA: clA, clB: clB}
	untilUnlock := func(*client.Mutex, *believedHold) belief {
		return func() bool { return true }
	}

	// Broken: believes until Unlock, whatever Held and Lost say.
	lt.handOff(ctx, "hv-until-unlock", time.Second, handOffHooks{belief: untilUnlock})
	lt.want("hv-until-unlock", "overlap")

	// Broken: counts the full TTL from when the holder read the last
	// renewal's answer, which a pause (a GC pause, say) delayed until
	// the key had been given away.
	var paused bool // the pause is over: B holds the key
	var read int64  // when the renewal's answer was read
	lt.handOff(ctx, "hv-from-arrival", time.Second, handOffHooks{
		prep: func(m *client.Mutex, b *believedHold) {
			lt.renew(m, b, time.Second)
		},
		afterB: func(*client.Mutex) { paused = true },
		belief: func(m *client.Mutex, b *believedHold) belief {
			return func() bool {
				if !paused {
					return true // counting from the acquire: within its TTL
				}
				if read == 0 {
					read = lt.hv.now() // after the sample's instant, however late
				}
				return lt.hv.now() < read+int64(time.Second)
			}
		},
	})
	lt.want("hv-from-arrival", "overlap")

	// The same with the client's own belief: no finding.
	lt.handOff(ctx, "hv-client", time.Second, handOffHooks{})
	lt.want("hv-client")

	// A semaphore whose holder believes until Release: 3 permits of 2.
	lt.semHandOff(ctx, "hv-sem-until-release")
	lt.want("hv-sem-until-release", "permits")

	// A force-unlock of A (TTL 20 s, not renewed) while B waits: the
	// master revokes, A's client marks the hold lost and releases, and
	// only then is B granted and the operator answered 200. With the
	// client's belief: no finding, and A's Held is false once B's Lock
	// returned. Broken (believes until Unlock): the overlap, and A's
	// belief after the 200 answer that lists its hold.
	lt.revokeHandOff(ctx, "hv-revoke-client", nil)
	lt.want("hv-revoke-client")
	lt.revokeHandOff(ctx, "hv-revoke-until-unlock", untilUnlock)
	lt.want("hv-revoke-until-unlock", "overlap", "revoked")

	// A shorter Renew (20 s to 1 s), then the key's master is paused:
	// the new master lets the hold expire 1 s after it takes over and
	// grants B, and no Lost push reaches A's client. The client counted
	// the 1 s from the renewal's send: no finding. Broken (the client
	// before the fix: a shorter Renew did not shorten its validity, still
	// counted from the acquire with 20 s): the overlap, and a belief past
	// the validity the client could count.
	lt.shortRenewPause(ctx, "hv-short-renew-pause", nil)
	lt.want("hv-short-renew-pause")
	lt.shortRenewPause(ctx, "hv-short-renew-pause-unshortened", func(m *client.Mutex, b *believedHold) belief {
		return func() bool { return lt.hv.now() < b.start+int64(b.ttl) }
	})
	lt.want("hv-short-renew-pause-unshortened", "overlap", "stale")
	t.Logf("holder view: %v", lt.hv.summary())
}

// liveTest is TestHolderViewLive's cluster, clients and holder view.
type liveTest struct {
	t        *testing.T
	c        *cluster
	hv       *holderView
	clA, clB *client.Client
}

// handOffHooks are what a handOff does beside taking and releasing.
type handOffHooks struct {
	// prep is called once A holds the key, before B waits for it.
	prep func(*client.Mutex, *believedHold)
	// waiting is called once B waits in the key's queue.
	waiting func(*client.Mutex, *believedHold)
	// afterB is called once B's Lock returned and B looked at its
	// belief, before A looks at its own.
	afterB func(*client.Mutex)
	// belief makes A's belief; nil: the client's (Held and Lost).
	belief func(*client.Mutex, *believedHold) belief
}

// handOff: A takes key through clA with ttl, renewing by hand, and calls
// prep; B then waits for key through clB (TTL 5 s), and waiting is
// called once the key's queue holds B. Once B's Lock returned and B
// looked at its belief, afterB is called and A looks at its own belief
// three times; then both unlock.
func (lt *liveTest) handOff(ctx context.Context, key string, ttl time.Duration, hk handOffHooks) {
	t, hv := lt.t, lt.hv
	t.Helper()
	m := lt.clA.Mutex(key, client.TTL(ttl))
	b := believedHold{key: key, kind: holdExclusive, owner: m.Owner(), worker: 1, ttl: ttl, call: hv.now()}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := m.Lock(lctx)
	b.start = hv.now()
	cancel()
	if err != nil {
		t.Fatalf("%s: A's lock: %v", key, err)
	}
	b.token = m.Token()
	a := hv.begin(b)
	believe := hv.clientBelief(a, m.Held, m.Lost())
	if hk.belief != nil {
		believe = hk.belief(m, a)
	}
	hv.sample(a, believe)
	if hk.prep != nil {
		hk.prep(m, a)
	}
	got := make(chan *believedHold, 1)
	aDone := make(chan struct{})
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		mb := lt.clB.Mutex(key, client.TTL(5*time.Second))
		hb := believedHold{key: key, kind: holdExclusive, owner: mb.Owner(), worker: 2, ttl: 5 * time.Second, call: hv.now()}
		lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		err := mb.Lock(lctx)
		hb.start = hv.now()
		if err != nil {
			t.Errorf("%s: B's lock: %v", key, err)
			got <- nil
			return
		}
		hb.token = mb.Token()
		bh := hv.begin(hb)
		hv.sample(bh, hv.clientBelief(bh, mb.Held, mb.Lost()))
		got <- bh
		<-aDone
		hv.sample(bh, hv.clientBelief(bh, mb.Held, mb.Lost()))
		bh.unlock = hv.now()
		if err := mb.Unlock(lctx); err != nil {
			// Not what this test is about; the report shows it.
			bh.unlockE = err.Error()
		}
	}()
	if hk.waiting != nil {
		lt.c.waitUntil(key+": B waits in the key's queue", 20*time.Second, func() bool {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			defer scancel()
			st, err := lt.clA.State(sctx, key)
			return err == nil && st.QueueLen > 0
		})
		hk.waiting(m, a)
	}
	bh := <-got
	if bh != nil {
		// A is back at work: B holds the key now.
		if hk.afterB != nil {
			hk.afterB(m)
		}
		for range 3 {
			hv.sample(a, believe)
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(aDone)
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
	a.unlock = hv.now()
	if err := m.Unlock(uctx); err != nil {
		a.unlockE = err.Error()
	}
	ucancel()
	<-bDone
	if bh == nil {
		t.FailNow()
	}
	t.Logf("%s: A (token %d) believed %s..%s, B (token %d) from %s", key, a.token, at(a.start), at(a.last()), bh.token, at(bh.start))
}

// revokeHandOff: A takes key (TTL 20 s, not renewed) with the belief mk
// makes (nil: the client's); once B waits for it, an operator
// force-unlocks it as the workload does, which must answer 200 listing
// A's hold; once B's Lock returned, A's Held must be false and its Lost
// closed.
func (lt *liveTest) revokeHandOff(ctx context.Context, key string, mk func(*client.Mutex, *believedHold) belief) {
	t := lt.t
	t.Helper()
	w := &hvWorkload{hv: lt.hv, ns: "e2e", http: hvHTTPClient()}
	lt.handOff(ctx, key, 20*time.Second, handOffHooks{
		belief: mk,
		waiting: func(m *client.Mutex, a *believedHold) {
			lt.hv.note("force-unlock %q", key)
			r, ok := w.forceUnlock(ctx, key, lt.c.admins())
			switch {
			case !ok:
				t.Errorf("%s: the force-unlock was not sent", key)
			case !r.exact() || !slices.ContainsFunc(r.released, func(x revokedHold) bool { return x.means(a) }):
				t.Errorf("%s: the force-unlock did not answer 200 listing A's hold (token %d): %s", key, a.token, r)
			default:
				t.Logf("%s: %s", key, r)
			}
		},
		afterB: func(m *client.Mutex) {
			if m.Held() {
				t.Errorf("%s: A's Held() is true after B's Lock returned (valid until %v from now)", key, time.Until(m.ValidUntil()))
			}
			select {
			case <-m.Lost():
			default:
				t.Errorf("%s: A's Lost() is not closed after B's Lock returned", key)
			}
		},
	})
}

// shortRenewPause: A takes key with a 20 s TTL and the belief mk makes
// (nil: the client's), renews with 1 s, and the key's master is paused
// (SIGSTOP) until B, waiting meanwhile, has been granted the key and A
// has looked at its belief again.
func (lt *liveTest) shortRenewPause(ctx context.Context, key string, mk func(*client.Mutex, *believedHold) belief) {
	t := lt.t
	t.Helper()
	var stopped *proc
	defer func() {
		if stopped != nil {
			_ = stopped.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	lt.handOff(ctx, key, 20*time.Second, handOffHooks{
		belief: mk,
		prep: func(m *client.Mutex, b *believedHold) {
			lt.renew(m, b, time.Second)
			stopped = lt.master(key)
			lt.hv.note("SIGSTOP node %d, the key's master", stopped.id)
			if err := stopped.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatalf("pause node %d: %v", stopped.id, err)
			}
		},
	})
	if err := stopped.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("resume node %d: %v", stopped.id, err)
	}
	lt.hv.note("SIGCONT node %d", stopped.id)
	stopped = nil
	lt.c.waitUntil("every group served again", 30*time.Second, func() bool {
		n := 0
		for _, p := range lt.c.procs {
			n += len(lt.c.servedGroups(p))
		}
		return n == 15
	})
}

// renew renews m by hand to ttl, recording it in b.
func (lt *liveTest) renew(m *client.Mutex, b *believedHold, ttl time.Duration) {
	lt.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := renewal{call: lt.hv.now(), ttl: ttl}
	err := m.Renew(ctx, ttl)
	r.ret, r.ok = lt.hv.now(), err == nil
	b.renews = append(b.renews, r)
	if err != nil {
		lt.t.Fatalf("%s: renew: %v", b.key, err)
	}
}

// semHandOff: A takes both permits of a 2-permit semaphore (TTL 1 s, no
// renewal) and believes until Release; B waits for one; once B has it,
// A looks again.
func (lt *liveTest) semHandOff(ctx context.Context, key string) {
	t, hv := lt.t, lt.hv
	hv.setTotal(key, 2)
	s := lt.clA.Semaphore(key, 2, client.TTL(time.Second))
	b := believedHold{key: key, kind: holdSemaphore, permits: 2, owner: wire.Owner{Client: lt.clA.ID(), ID: 1}, worker: 1, ttl: time.Second, call: hv.now()}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := s.Acquire(lctx, 2)
	b.start = hv.now()
	if err != nil {
		t.Fatalf("%s: A's acquire: %v", key, err)
	}
	b.token = s.Token()
	a := hv.begin(b)
	believe := func() bool { return true }
	hv.sample(a, believe)
	sb := lt.clB.Semaphore(key, 2, client.TTL(5*time.Second))
	hb := believedHold{key: key, kind: holdSemaphore, permits: 1, owner: wire.Owner{Client: lt.clB.ID(), ID: 2}, worker: 2, ttl: 5 * time.Second, call: hv.now()}
	if err := sb.Acquire(lctx, 1); err != nil {
		t.Fatalf("%s: B's acquire: %v", key, err)
	}
	hb.start = hv.now()
	hb.token = sb.Token()
	bh := hv.begin(hb)
	hv.sample(bh, hv.clientBelief(bh, func() bool { return sb.Held() > 0 }, sb.Lost()))
	hv.sample(a, believe)
	a.unlock = hv.now()
	if err := s.Release(lctx); err != nil {
		a.unlockE = err.Error()
	}
	if err := sb.Release(lctx); err != nil {
		t.Errorf("%s: B's release: %v", key, err)
	}
}

// master returns the node that serves key's group.
func (lt *liveTest) master(key string) *proc {
	g := wire.GroupOf(wire.KeyHash("e2e", key), 15)
	var m *proc
	lt.c.waitUntil("the key's group has a master", 20*time.Second, func() bool {
		for _, p := range lt.c.procs {
			if slices.Contains(lt.c.servedGroups(p), g) {
				m = p
				return true
			}
		}
		return false
	})
	return m
}

// want checks what the holder view found on key: a finding of each of
// kinds (other findings beside them are logged), or none at all if kinds
// is empty.
func (lt *liveTest) want(key string, kinds ...string) {
	t := lt.t
	t.Helper()
	var found []hvFinding
	for _, f := range lt.hv.check() {
		if f.key == key {
			found = append(found, f)
		}
	}
	if len(kinds) == 0 {
		for _, f := range found {
			t.Errorf("holder view: %s", f.text)
		}
		return
	}
	for _, k := range kinds {
		if !slices.ContainsFunc(found, func(f hvFinding) bool { return f.kind == k }) {
			t.Errorf("%s: the checker reported no %s finding of a broken belief (found %d others)", key, k, len(found))
		}
	}
	for _, f := range found {
		t.Logf("%s: found, as it should: %s", key, firstLine(f.text))
	}
}
