package mover

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

var errCrash = errors.New("injected crash")

// world is two fake clusters and a fake meta table that check, after
// every change, that at most one cluster serves the namespace.
type world struct {
	t        *testing.T
	clusters map[string]*fakeCluster
	assigned string
	moves    []Move
	fence    uint64
	calls    int
	crashAt  int // the call that fails (0: none)
}

// nsState is a namespace's state in one fake cluster.
type nsState struct {
	serving, frozen, incoming, owned, dropped bool
	movedTo                                   []string
	records                                   map[string]uint64
	batches                                   map[[2]int]bool
}

type fakeCluster struct {
	w        *world
	name     string
	versions []uint64
	ns       nsState
	fence    uint64 // the highest mover token seen
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, clusters: map[string]*fakeCluster{}, assigned: "s"}
	w.clusters["s"] = &fakeCluster{w: w, name: "s", versions: []uint64{3, 7, 5},
		ns: nsState{serving: true, records: map[string]uint64{"a": 3<<48 | 10, "b": 7<<48 | 99, "c": 5<<48 | 4}}}
	w.clusters["t"] = &fakeCluster{w: w, name: "t", versions: []uint64{1, 1}, ns: nsState{records: map[string]uint64{}}}
	return w
}

func (w *world) find(name string) (Cluster, error) {
	c, ok := w.clusters[name]
	if !ok {
		return nil, fmt.Errorf("no cluster %q", name)
	}
	return c, nil
}

// call counts one call to a cluster or the table and fails the one
// chosen to crash.
func (w *world) call() error {
	w.calls++
	if w.calls == w.crashAt {
		return errCrash
	}
	return nil
}

func (w *world) check() {
	w.t.Helper()
	n := 0
	for _, c := range w.clusters {
		if c.ns.serving {
			n++
		}
	}
	if n > 1 {
		w.t.Fatalf("both clusters serve the namespace")
	}
}

func (w *world) PutMove(_ context.Context, m Move, token uint64) error {
	if err := w.call(); err != nil {
		return err
	}
	if token < w.fence {
		return fmt.Errorf("token %d below %d: %w", token, w.fence, ErrFenced)
	}
	w.fence = token
	if m.State.Flipped() {
		w.assigned = m.To
	}
	w.moves = append(w.moves, m)
	return nil
}

func (w *world) Verifier(context.Context, string) (adminapi.Verifier, error) {
	return adminapi.Verifier{Iters: 4096}, w.call()
}

func (c *fakeCluster) Addrs() []string { return []string{c.name + ":1"} }

// enter counts a call and fences it by the mover token.
func (c *fakeCluster) enter(token uint64) error {
	if err := c.w.call(); err != nil {
		return err
	}
	if token < c.fence {
		return fmt.Errorf("token %d below %d: %w", token, c.fence, ErrFenced)
	}
	c.fence = token
	return nil
}

func (c *fakeCluster) Incoming(_ context.Context, token uint64, _ string, _ uint64, _ adminapi.Verifier) error {
	if err := c.enter(token); err != nil {
		return err
	}
	c.ns.incoming = true
	return nil
}

func (c *fakeCluster) Freeze(_ context.Context, token uint64, _ string, _ uint64) error {
	if err := c.enter(token); err != nil {
		return err
	}
	c.ns.frozen, c.ns.serving = true, false
	return nil
}

func (c *fakeCluster) Export(_ context.Context, token uint64, _ string, _ uint64, fn func(int, int, []byte) error) (uint64, error) {
	if !c.ns.frozen {
		c.w.t.Fatalf("export of a namespace not frozen")
	}
	for i, k := range slices.Sorted(maps.Keys(c.ns.records)) {
		if err := c.enter(token); err != nil {
			return 0, err
		}
		if err := fn(i%2, i/2, []byte(fmt.Sprintf("%s=%d", k, c.ns.records[k]))); err != nil {
			return 0, err
		}
	}
	return slices.Max(c.versions), nil
}

func (c *fakeCluster) RaiseVersion(_ context.Context, token uint64, _ string, min uint64) error {
	if err := c.enter(token); err != nil {
		return err
	}
	for i := range c.versions {
		c.versions[i] = max(c.versions[i], min)
	}
	return nil
}

func (c *fakeCluster) Import(_ context.Context, token uint64, _ string, _ uint64, g, batch int, pairs []byte) error {
	if err := c.enter(token); err != nil {
		return err
	}
	if c.ns.batches == nil {
		c.ns.batches = map[[2]int]bool{}
	}
	if c.ns.batches[[2]int{g, batch}] {
		return nil
	}
	c.ns.batches[[2]int{g, batch}] = true
	var k string
	var tok uint64
	if _, err := fmt.Sscanf(string(pairs), "%1s=%d", &k, &tok); err != nil {
		c.w.t.Fatalf("bad pairs %q", pairs)
	}
	c.ns.records[k] = tok
	return nil
}

func (c *fakeCluster) Own(_ context.Context, token uint64, _ string, _ uint64) error {
	if err := c.enter(token); err != nil {
		return err
	}
	if src := c.w.clusters["s"]; !src.ns.frozen {
		c.w.t.Fatalf("the target owns the namespace while the source is not frozen")
	}
	for _, v := range c.versions {
		if v <= slices.Max(c.w.clusters["s"].versions) {
			c.w.t.Fatalf("the target owns the namespace with group version %d, not above the source's", v)
		}
	}
	c.ns.owned, c.ns.serving, c.ns.incoming = true, true, false
	c.w.check()
	return nil
}

func (c *fakeCluster) Drop(_ context.Context, token uint64, _ string, _ uint64, movedTo []string) error {
	if err := c.enter(token); err != nil {
		return err
	}
	c.ns.dropped, c.ns.movedTo, c.ns.records = true, movedTo, map[string]uint64{}
	return nil
}

func (c *fakeCluster) Unfreeze(_ context.Context, token uint64, _ string, _ uint64) error {
	if err := c.enter(token); err != nil {
		return err
	}
	c.ns.frozen, c.ns.serving = false, true
	c.w.check()
	return nil
}

func (c *fakeCluster) Forget(_ context.Context, token uint64, _ string, _ uint64) error {
	if err := c.enter(token); err != nil {
		return err
	}
	c.ns = nsState{records: map[string]uint64{}}
	return nil
}

func (w *world) last() Move {
	if len(w.moves) == 0 {
		return Move{Namespace: "n", From: "s", To: "t", ID: 1, State: Prepare}
	}
	return w.moves[len(w.moves)-1]
}

// checkMoved asserts the end state of a completed move.
func (w *world) checkMoved() {
	w.t.Helper()
	s, tg := w.clusters["s"], w.clusters["t"]
	if w.assigned != "t" || !tg.ns.serving || !tg.ns.owned || s.ns.serving || !s.ns.dropped {
		w.t.Fatalf("not moved: assigned %s, source %+v, target %+v", w.assigned, s.ns, tg.ns)
	}
	if !slices.Equal(s.ns.movedTo, []string{"t:1"}) {
		w.t.Errorf("the tombstone sends clients to %v", s.ns.movedTo)
	}
	want := map[string]uint64{"a": 3<<48 | 10, "b": 7<<48 | 99, "c": 5<<48 | 4}
	if !maps.Equal(tg.ns.records, want) {
		w.t.Errorf("target records %v, want %v", tg.ns.records, want)
	}
	for _, v := range tg.versions {
		if v <= 7 {
			w.t.Errorf("a target group's version is %d, not above the source's highest (7)", v)
		}
	}
}

func TestDriveMovesTheNamespace(t *testing.T) {
	w := newWorld(t)
	m, err := Drive(context.Background(), w.last(), w, w.find, 1)
	if err != nil || m.State != Done {
		t.Fatalf("Drive: %v, state %s", err, m.State)
	}
	w.checkMoved()
	var states []State
	for _, r := range w.moves {
		states = append(states, r.State)
	}
	if want := []State{Freeze, Copy, Flip, Drop, Done}; !slices.Equal(states, want) {
		t.Errorf("recorded %v, want %v", states, want)
	}
}

// A crash at any call, followed by another driver resuming from the
// record with a newer token, still moves the namespace exactly once.
func TestDriveResumesAfterACrashAtEveryCall(t *testing.T) {
	clean := newWorld(t)
	if _, err := Drive(context.Background(), clean.last(), clean, clean.find, 1); err != nil {
		t.Fatal(err)
	}
	for at := 1; at <= clean.calls; at++ {
		t.Run(fmt.Sprint("crash at call ", at), func(t *testing.T) {
			w := newWorld(t)
			w.crashAt = at
			if _, err := Drive(context.Background(), w.last(), w, w.find, 1); !errors.Is(err, errCrash) {
				t.Fatalf("first driver: %v, want the crash", err)
			}
			m, err := Drive(context.Background(), w.last(), w, w.find, 2)
			if err != nil || m.State != Done {
				t.Fatalf("second driver: %v, state %s", err, m.State)
			}
			w.checkMoved()
		})
	}
}

func TestAbortBeforeTheFlipLeavesTheSourceServing(t *testing.T) {
	for _, upTo := range []State{Prepare, Freeze, Copy} {
		t.Run(string(upTo), func(t *testing.T) {
			w := newWorld(t)
			m := w.last()
			from, to, _ := endpoints(m, w.find)
			for m.State != upTo {
				next, err := step(context.Background(), m, w, from, to, 1)
				if err != nil {
					t.Fatal(err)
				}
				m.State = next
			}
			m, err := Abort(context.Background(), m, w, w.find, 1)
			if err != nil || m.State != Aborted {
				t.Fatalf("Abort: %v, state %s", err, m.State)
			}
			s, tg := w.clusters["s"], w.clusters["t"]
			if !s.ns.serving || s.ns.frozen || len(s.ns.records) != 3 || tg.ns.serving || len(tg.ns.records) != 0 || w.assigned != "s" {
				t.Fatalf("after abort: source %+v, target %+v, assigned %s", s.ns, tg.ns, w.assigned)
			}
		})
	}
}

func TestAbortAfterTheFlipIsRefused(t *testing.T) {
	w := newWorld(t)
	for _, st := range []State{Flip, Drop} {
		m := w.last()
		m.State = st
		if _, err := Abort(context.Background(), m, w, w.find, 1); !errors.Is(err, ErrFlipped) {
			t.Errorf("abort at %s: %v, want ErrFlipped", st, err)
		}
	}
	m := w.last()
	m.State = Done
	if _, err := Abort(context.Background(), m, w, w.find, 1); !errors.Is(err, ErrEnded) {
		t.Errorf("abort of a done move: %v, want ErrEnded", err)
	}
}

// An aborting move recorded by a driver that crashed is finished by the
// next one.
func TestDriveFinishesAnAbort(t *testing.T) {
	w := newWorld(t)
	m := w.last()
	m.State = Aborting
	w.clusters["s"].ns.frozen, w.clusters["s"].ns.serving = true, false
	m, err := Drive(context.Background(), m, w, w.find, 1)
	if err != nil || m.State != Aborted || !w.clusters["s"].ns.serving {
		t.Fatalf("Drive of an aborting move: %v, state %s, source serving %v", err, m.State, w.clusters["s"].ns.serving)
	}
}

func TestAStaleDriverIsFenced(t *testing.T) {
	w := newWorld(t)
	w.fence = 5
	_, err := Drive(context.Background(), w.last(), w, w.find, 4)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("a driver with an old token: %v, want ErrFenced", err)
	}
	if len(w.moves) != 0 {
		t.Errorf("a fenced driver recorded %v", w.moves)
	}
}

// A driver that stalled and wakes after another took over cannot change
// the clusters: they refuse its token.
func TestAStaleDriverCannotUndoTheNextOnesWork(t *testing.T) {
	w := newWorld(t)
	m, err := Drive(context.Background(), w.last(), w, w.find, 2)
	if err != nil || m.State != Done {
		t.Fatal(err)
	}
	stale := Move{Namespace: "n", From: "s", To: "t", ID: 1, State: Freeze}
	if _, err := Drive(context.Background(), stale, w, w.find, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("a stale driver's freeze: %v, want ErrFenced", err)
	}
	stale.State = Aborting
	if _, err := Drive(context.Background(), stale, w, w.find, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("a stale driver's abort: %v, want ErrFenced", err)
	}
	w.checkMoved()
}

func TestDriveRefusesAMoveToItself(t *testing.T) {
	w := newWorld(t)
	m := w.last()
	m.To = "s"
	if _, err := Drive(context.Background(), m, w, w.find, 1); err == nil {
		t.Fatal("a move to the same cluster was driven")
	}
}
