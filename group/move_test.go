package group

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
)

// moveAll takes step in every lock group of c, on each group's master.
func moveAll(t *testing.T, c *fakeCluster, step MoveStep, ns, id, to string) {
	t.Helper()
	for g := range c.groups {
		_, svc := c.groupMaster(ID(g))
		if err := svc.Group(ID(g)).MoveStep(context.Background(), step, ns, id, to, 0); err != nil {
			t.Fatalf("step %d in group %d: %v", step, g, err)
		}
	}
}

// follower returns a node of c that does not master group g.
func (c *fakeCluster) follower(g int) *Service {
	m, _ := c.groupMaster(ID(g))
	for _, id := range c.peers {
		if id != m && !c.down[id] {
			return c.svcs[id]
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// copyNamespace exports ns from every group of src (on a follower, which
// has applied the freeze like the master) and imports it into dst in
// batches of about batchBytes, each key to the dst group it hashes to,
// then raises every dst group's version above every src group's. It
// returns the number of locks exported.
func copyNamespace(t *testing.T, src, dst *fakeCluster, ns, id string, batchBytes int) int {
	t.Helper()
	ctx := context.Background()
	var maxVer uint64
	locks := 0
	for g := range src.groups {
		batch := uint32(0)
		ex, err := src.follower(g).Group(ID(g)).ExportMove(ns, id, batchBytes, func(pairs []byte) error {
			parts, err := dst.svc(1).SplitImport(ns, pairs)
			if err != nil {
				return err
			}
			for tg, p := range parts {
				_, svc := dst.groupMaster(ID(tg))
				if err := svc.Group(ID(tg)).Import(ctx, ns, id, uint32(g), batch, p, 0); err != nil {
					return err
				}
				// A batch repeated changes nothing.
				if err := svc.Group(ID(tg)).Import(ctx, ns, id, uint32(g), batch, p, 0); err != nil {
					return err
				}
			}
			batch++
			return nil
		})
		if err != nil {
			t.Fatalf("export group %d: %v", g, err)
		}
		locks += ex.Locks
		maxVer = max(maxVer, ex.Version)
	}
	for g := range dst.groups {
		_, svc := dst.groupMaster(ID(g))
		maxVer = max(maxVer, svc.Group(ID(g)).StateMachine().Version())
	}
	for g := range dst.groups {
		_, svc := dst.groupMaster(ID(g))
		if _, err := svc.Group(ID(g)).RaiseVersion(ctx, maxVer+1); err != nil {
			t.Fatal(err)
		}
	}
	return locks
}

// TestMoveNamespace moves a namespace between two clusters of different
// group counts, step by step: holds (mutex, RW readers, semaphore, with
// values) survive with owner, token and TTL; requests during the move
// are answered MOVING; a queued waiter is told MOVING; tokens granted at
// the target exceed every token of the source; the dropped source
// answers MOVED with the target's addresses; every step repeated changes
// nothing; and the move records survive a checkpoint and reload.
func TestMoveNamespace(t *testing.T) {
	t.Parallel()
	const ns, id = "ns", "move-1"
	fc := newFakeClock()
	src := newFakeCluster(t, 3, Config{Groups: 4, Clock: fc})
	dst := newFakeCluster(t, 3, Config{Groups: 3, Clock: newFakeClock()})
	sk := newSink()
	// Holds at the source; one group's version raised, so that the
	// versions differ.
	_, g0 := src.groupMaster(0)
	if _, err := g0.Group(0).RaiseVersion(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	type hold struct {
		key   string
		owner wire.Owner
		token uint64
	}
	var holds []hold
	var maxSrcToken uint64
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		o := owner(1, uint64(i+1))
		r := src.do(sk, Request{Op: OpAcquire, Key: key, Owner: o, Kind: wire.KindExclusive, TTL: 10 * time.Second, Value: "v" + key})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %v", key, r.Status)
		}
		holds = append(holds, hold{key, o, r.Token})
		maxSrcToken = max(maxSrcToken, r.Token)
	}
	for i := range 2 {
		o := owner(2, uint64(i+1))
		r := src.do(sk, Request{Op: OpAcquire, Key: "rw", Owner: o, Kind: wire.KindRead, TTL: 10 * time.Second})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("read %d: %v", i, r.Status)
		}
		holds = append(holds, hold{"rw", o, r.Token})
	}
	r := src.do(sk, Request{Op: OpAcquire, Key: "sem", Owner: owner(3, 1), Kind: wire.KindSemaphore, Permits: 2, Limit: 5, TTL: 10 * time.Second, Value: "semv"})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("semaphore: %v", r.Status)
	}
	holds = append(holds, hold{"sem", owner(3, 1), r.Token})
	// A waiter queued on k0.
	wsk := newSink()
	if r := src.do(wsk, Request{Op: OpAcquire, Key: "k0", Owner: owner(9, 1), Kind: wire.KindExclusive, MaxWait: -1, WaitID: 7}); r.Status != wire.StatusLockWait {
		t.Fatalf("waiter: %v", r.Status)
	}
	// A continuous watch on k2: kept through the freeze, told EventMoved
	// when the drop ends it.
	wch := newSink()
	if r := src.do(wch, watchReq("k2", 3, holds[2].token, wire.FlagContinuous, 0)); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %v", r.Status)
	}
	// Prefix watches on k2's group: the namespace's is told EventMoved at
	// the drop too; another namespace's stays.
	g2 := Of(wire.KeyHash(ns, "k2"), src.groups)
	pother := newSink()
	if r := src.doPrefix(wch, OpWatch, ns, "k", 4, int(g2)); r.Status != wire.StatusSuccess {
		t.Fatalf("prefix watch: %v", r.Status)
	}
	if r := src.doPrefix(pother, OpWatch, "other-ns", "k", 1, int(g2)); r.Status != wire.StatusSuccess {
		t.Fatalf("another namespace's prefix watch: %v", r.Status)
	}

	// Prepare: the target answers MOVING and refuses an incoming for a
	// namespace it holds keys of.
	moveAll(t, dst, StepIncoming, ns, id, "")
	moveAll(t, dst, StepIncoming, ns, id, "") // repeated
	if r := dst.do(sk, Request{Op: OpAcquire, Key: "x", Owner: owner(5, 1), Kind: wire.KindExclusive}); r.Status != wire.StatusMoving || r.RetryAfterMs == 0 {
		t.Fatalf("target before the flip: %v retry %d, want MOVING", r.Status, r.RetryAfterMs)
	}
	if err := src.master("ns", "k0").Group(Of(wire.KeyHash("ns", "k0"), 4)).MoveStep(context.Background(), StepIncoming, ns, "other", "", 0); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("incoming on a group holding the namespace: %v", err)
	}

	// Freeze: MOVING for every request; the waiter is told MOVING.
	moveAll(t, src, StepFreeze, ns, id, "")
	moveAll(t, src, StepFreeze, ns, id, "")
	if g := wsk.granted(t, 7); g.Status != wire.StatusMoving {
		t.Fatalf("queued waiter: %v, want MOVING", g.Status)
	}
	if evs := wch.watchEvents(3); len(evs) != 0 {
		t.Fatalf("the watch heard %+v at the freeze, want nothing", evs)
	}
	if r := src.do(sk, Request{Op: OpRenew, Key: "k1", Owner: holds[1].owner, Token: holds[1].token}); r.Status != wire.StatusMoving {
		t.Fatalf("renew during the freeze: %v", r.Status)
	}
	if r := src.do(sk, Request{Op: OpAcquire, Key: "free", Owner: owner(5, 1), Kind: wire.KindExclusive}); r.Status != wire.StatusMoving {
		t.Fatalf("acquire during the freeze: %v", r.Status)
	}
	if r := src.do(sk, Request{Op: OpAcquire, Key: "other", Namespace: "ns2", Owner: owner(5, 1), Kind: wire.KindExclusive}); r.Status != wire.StatusSuccess {
		t.Fatalf("another namespace during the freeze: %v", r.Status)
	}
	// No expiry at the frozen source, however long.
	fc.Advance(time.Minute)
	var frozen int64
	for g := range src.groups {
		frozen += src.svc(1).Group(ID(g)).StateMachine().MoveInfo(ns).Locks
	}
	if frozen != 22 {
		t.Fatalf("the frozen source holds %d keys of the namespace a minute on, want 22", frozen)
	}

	// Copy, in small batches, each repeated.
	if n := copyNamespace(t, src, dst, ns, id, 64); n != 22 {
		t.Fatalf("exported %d locks, want 22", n)
	}
	var held int64
	for g := range dst.groups {
		held += dst.svc(1).Group(ID(g)).StateMachine().MoveInfo(ns).Locks
	}
	if held != 22 {
		t.Fatalf("target holds %d keys of the namespace, want 22", held)
	}

	// Flip.
	moveAll(t, dst, StepOwn, ns, id, "")
	moveAll(t, dst, StepOwn, ns, id, "")
	for _, h := range holds {
		r := dst.do(sk, Request{Op: OpRenew, Key: h.key, Owner: h.owner, Token: h.token})
		if r.Status != wire.StatusSuccess || r.Token != h.token {
			t.Fatalf("renew %s at the target: %v token %d, want %d", h.key, r.Status, r.Token, h.token)
		}
	}
	st := dst.state("k3")
	if st.Holder != holds[3].owner || st.Value != "vk3" {
		t.Fatalf("k3 at the target: %+v", st)
	}
	if st := dst.state("sem"); st.InUse != 2 || st.Permits != 5 {
		t.Fatalf("semaphore at the target: in use %d of %d", st.InUse, st.Permits)
	}
	// Tokens granted at the target exceed every source token, also on a
	// key that was held there.
	if r := dst.do(sk, Request{Op: OpRelease, Key: "k0", Owner: holds[0].owner, Token: holds[0].token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release k0: %v", r.Status)
	}
	for _, key := range []string{"k0", "new"} {
		r := dst.do(sk, Request{Op: OpAcquire, Key: key, Owner: owner(6, 1), Kind: wire.KindExclusive})
		if r.Status != wire.StatusSuccess || r.Token <= maxSrcToken {
			t.Fatalf("acquire %s at the target: %v token %x, source's highest %x", key, r.Status, r.Token, maxSrcToken)
		}
	}

	// Drop: MOVED with the target's addresses; the records are gone.
	moveAll(t, src, StepDrop, ns, id, "t1:7000,t2:7000")
	moveAll(t, src, StepDrop, ns, id, "t1:7000,t2:7000")
	if r := src.do(sk, Request{Op: OpAcquire, Key: "k5", Owner: owner(5, 1), Kind: wire.KindExclusive}); r.Status != wire.StatusMoved || r.Redirect != "t1:7000,t2:7000" {
		t.Fatalf("source after the drop: %v %q", r.Status, r.Redirect)
	}
	if e := wch.waitWatch(t, 3, 1)[0]; e.Event != wire.EventMoved || e.Key != "k2" {
		t.Fatalf("the watch at the drop: %+v, want EventMoved", e)
	}
	wch.wait(t, "the prefix watch told EventMoved at the drop", func() bool {
		for _, m := range wch.pushes {
			if e, ok := m.(*wire.WatchEvent); ok && e.WatchID == 4 && e.Event == wire.EventMoved && e.Key == "k" {
				return true
			}
		}
		return false
	})
	if _, svc := src.groupMaster(g2); len(pother.watchEvents(1)) != 0 || len(svc.Group(g2).prefix.load()["other-ns"]) != 1 {
		t.Fatalf("another namespace's prefix watch at the drop: events %+v", pother.watchEvents(1))
	}
	for g := range src.groups {
		if info := src.svc(2).Group(ID(g)).StateMachine().MoveInfo(ns); info.Locks != 0 || info.State != MoveDropped {
			t.Fatalf("source group %d after the drop: %+v", g, info)
		}
	}
	// An abort after the flip is refused.
	_, s0 := dst.groupMaster(0)
	if err := s0.Group(0).MoveStep(context.Background(), StepUnfreeze, ns, id, "", 0); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("abort after the flip: %v", err)
	}
	// The move records reload with the table.
	for _, c := range []*fakeCluster{src, dst} {
		for g := range c.groups {
			checkMoveReload(t, c.fgs[g].replica(3))
		}
	}
}

// checkMoveReload checkpoints r and loads its keyspace into a fresh
// state machine: the same move records, gates and lock table.
func checkMoveReload(t *testing.T, r *fakeReplica) {
	t.Helper()
	r.sm.Checkpoint(r.kv)
	re := NewStateMachine(2)
	if err := re.Load(r.kv.clone(), r.sm.Applied()); err != nil {
		t.Fatal(err)
	}
	if !re.moves.Equal(&r.sm.moves) {
		t.Fatalf("reloaded move records of %v, live %v", re.moves.Namespaces(), r.sm.moves.Namespaces())
	}
	if a, b := dumpSM(re), dumpSM(r.sm); !reflect.DeepEqual(a, b) {
		t.Fatalf("reloaded table differs\n loaded: %v\n live:   %v", a, b)
	}
	for _, ns := range r.sm.moves.Namespaces() {
		g1, ok1 := re.gateNS(ns)
		g2, ok2 := r.sm.gateNS(ns)
		if g1 != g2 || ok1 != ok2 {
			t.Fatalf("gate of %q: reloaded %v %v, live %v %v", ns, g1, ok1, g2, ok2)
		}
	}
}

// TestMoveAbort: a move aborted after the copy, before the flip, leaves
// the source serving with every hold as it was (renewable with its
// token, expiring again once unrenewed) and the target with nothing.
func TestMoveAbort(t *testing.T) {
	t.Parallel()
	const ns, id = "ns", "move-2"
	fc := newFakeClock()
	src := newFakeCluster(t, 3, Config{Groups: 2, Clock: fc})
	dst := newFakeCluster(t, 3, Config{Groups: 3, Clock: newFakeClock()})
	sk := newSink()
	r := src.do(sk, Request{Op: OpAcquire, Key: "a", Owner: owner(1, 1), Kind: wire.KindExclusive, TTL: 5 * time.Second, LockDelayMs: 1000})
	if r.Status != wire.StatusSuccess {
		t.Fatal(r.Status)
	}
	tok := r.Token
	if r := src.do(sk, Request{Op: OpAcquire, Key: "b", Owner: owner(1, 2), Kind: wire.KindExclusive, TTL: 5 * time.Second}); r.Status != wire.StatusSuccess {
		t.Fatal(r.Status)
	}
	moveAll(t, dst, StepIncoming, ns, id, "")
	moveAll(t, src, StepFreeze, ns, id, "")
	copyNamespace(t, src, dst, ns, id, 1<<20)
	moveAll(t, dst, StepUnfreeze, ns, id, "")
	moveAll(t, dst, StepUnfreeze, ns, id, "")
	moveAll(t, src, StepUnfreeze, ns, id, "")
	moveAll(t, src, StepUnfreeze, ns, id, "")
	for g := range dst.groups {
		if info := dst.svc(1).Group(ID(g)).StateMachine().MoveInfo(ns); info.Locks != 0 || info.State != MoveNone {
			t.Fatalf("target group %d after the abort: %+v", g, info)
		}
	}
	if r := src.do(sk, Request{Op: OpRenew, Key: "a", Owner: owner(1, 1), Token: tok}); r.Status != wire.StatusSuccess {
		t.Fatalf("renew at the source after the abort: %v", r.Status)
	}
	// Unrenewed, b expires again: its deadline was set anew.
	advanceUntil(t, fc, time.Second, "b expired", func() bool { return src.state("b").Status == wire.StatusLockDeleted })
	if st := src.state("a"); st.Status != wire.StatusLockDeleted {
		advanceUntil(t, fc, time.Second, "a expired", func() bool { return src.state("a").Status == wire.StatusLockDeleted })
	}
}

// TestMoveStepConflicts: steps out of order are refused and change
// nothing; a bad import batch is refused whole.
func TestMoveStepConflicts(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1, Config{Groups: 1, Clock: newFakeClock()})
	g := c.svc(1).Group(0)
	ctx := context.Background()
	for _, step := range []MoveStep{StepOwn, StepDrop} {
		if err := g.MoveStep(ctx, step, "ns", "m", "", 0); !errors.Is(err, ErrMoveConflict) {
			t.Fatalf("step %d first: %v", step, err)
		}
	}
	if err := g.MoveStep(ctx, StepIncoming, "ns", "m", "", 0); err != nil {
		t.Fatal(err)
	}
	for _, step := range []MoveStep{StepFreeze, StepDrop} {
		if err := g.MoveStep(ctx, step, "ns", "m", "", 0); !errors.Is(err, ErrMoveConflict) {
			t.Fatalf("step %d while incoming: %v", step, err)
		}
	}
	if err := g.MoveStep(ctx, StepOwn, "ns", "other", "", 0); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("own of another move: %v", err)
	}
	other := codec.AppendPair(nil, append([]byte{lockPrefix}, fullKey("ns2", "k")...), encodeRec(nil, &lockRec{first: holder{owner: owner(1, 1), token: 5, ttlMs: 1000, used: true}}))
	if err := g.Import(ctx, "ns", "m", 0, 0, other, 0); !errors.Is(err, ErrMoveBadBatch) {
		t.Fatalf("import of another namespace's record: %v", err)
	}
	if _, err := c.svc(1).SplitImport("ns", other); !errors.Is(err, ErrMoveBadBatch) {
		t.Fatalf("split of another namespace's record: %v", err)
	}
	if info := g.StateMachine().MoveInfo("ns"); info.Locks != 0 || info.Batches != 0 {
		t.Fatalf("after refused imports: %+v", info)
	}
	if err := g.MoveStep(ctx, StepFreeze, "ns", "m", "", 0); !errors.Is(err, ErrMoveConflict) {
		t.Fatal(err)
	}
}

// TestMoveStepFence: a step carrying a mover token below the highest
// applied for the namespace is refused and changes nothing, also after
// an abort left the namespace served (the fence outlives the move), and
// the fence reloads with the table.
func TestMoveStepFence(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1, Config{Groups: 1, Clock: newFakeClock()})
	g := c.svc(1).Group(0)
	ctx := context.Background()
	if err := g.MoveStep(ctx, StepFreeze, "ns", "m1", "", 5); err != nil {
		t.Fatal(err)
	}
	if err := g.MoveStep(ctx, StepUnfreeze, "ns", "m1", "", 5); err != nil {
		t.Fatal(err)
	}
	if info := g.StateMachine().MoveInfo("ns"); info.State != MoveNone {
		t.Fatalf("after the abort: %+v", info)
	}
	if _, gated := g.StateMachine().gateNS("ns"); gated {
		t.Fatal("a namespace whose move was aborted is gated")
	}
	// A driver that stalled with token 4 wakes and repeats its freeze.
	if err := g.MoveStep(ctx, StepFreeze, "ns", "m1", "", 4); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("a stale driver's freeze: %v, want ErrMoveConflict", err)
	}
	if err := g.MoveStep(ctx, StepFreeze, "ns", "m1", "", 0); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("an unfenced freeze once fenced: %v, want ErrMoveConflict", err)
	}
	if info := g.StateMachine().MoveInfo("ns"); info.State != MoveNone {
		t.Fatalf("a refused freeze changed the state: %+v", info)
	}
	checkMoveReload(t, c.fgs[0].replica(1))
	if err := g.MoveStep(ctx, StepFreeze, "ns", "m2", "", 6); err != nil {
		t.Fatalf("the next driver's freeze: %v", err)
	}
	if err := g.MoveStep(ctx, StepUnfreeze, "ns", "m2", "", 5); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("a stale driver's abort: %v, want ErrMoveConflict", err)
	}
	if info := g.StateMachine().MoveInfo("ns"); info.State != MoveFrozen || info.ID != "m2" {
		t.Fatalf("after a stale abort: %+v", info)
	}
}

// TestMoveExportIsDeterministic: two exports of a frozen namespace, on
// two replicas, cut the same batches (the target skips a batch number it
// applied, so a repeated export after a crash must not reshuffle them).
func TestMoveExportIsDeterministic(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 3, Config{Groups: 1, Clock: newFakeClock()})
	sk := newSink()
	for i := range 200 {
		key := fmt.Sprintf("k%03d", i)
		if r := c.do(sk, Request{Op: OpAcquire, Key: key, Owner: owner(1, uint64(i+1)), Kind: wire.KindExclusive, TTL: time.Minute}); r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %v", key, r.Status)
		}
	}
	moveAll(t, c, StepFreeze, "ns", "m", "")
	export := func(svc *Service) [][]byte {
		var out [][]byte
		if _, err := svc.Group(0).ExportMove("ns", "m", 1024, func(p []byte) error {
			out = append(out, p)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := export(c.follower(0)), export(c.svc(c.peers[0]))
	if len(a) < 3 || !reflect.DeepEqual(a, b) {
		t.Fatalf("two exports differ or are too few to tell (%d and %d batches)", len(a), len(b))
	}
}
