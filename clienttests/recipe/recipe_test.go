package recipe_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
	"github.com/paxlock/paxlock/paxlocktest"
)

// long bounds every call: a loaded 2-core machine under -race, across a
// master change.
const long = 90 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), long)
	t.Cleanup(cancel)
	return ctx
}

// stopMaster stops the node that masters key's group; the others elect a
// new master.
func stopMaster(t *testing.T, cl *paxlocktest.Cluster, key string) {
	t.Helper()
	n := cl.MasterOf(key)
	if n == 0 {
		t.Fatalf("no master known for %q", key)
	}
	if err := cl.StopNode(n); err != nil {
		t.Fatalf("stop node %d: %v", n, err)
	}
}

// retry calls f until it returns nil or an error no retry can cure: what
// a user does after a call ran out of retries during a master change.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || ctx.Err() != nil || !(errors.Is(err, client.ErrNoMaster) ||
			errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrTimeout) || errors.Is(err, client.ErrOverloaded)) {
			return err
		}
	}
}

// expectBlocked checks that f does not return before a short deadline:
// it is given a context that ends, and must fail with its error.
func expectBlocked(t *testing.T, what string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := f(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: %v, want it blocked until the context ended", what, err)
	}
}

func TestRecipeLatch(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	waiter := recipe.NewLatch(cl.Client(t), "latch:a", 3)
	if n, err := waiter.Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- waiter.Wait(ctx) }()

	var wg sync.WaitGroup
	var down atomic.Int32
	for range 3 {
		l := recipe.NewLatch(cl.Client(t), "latch:a", 3)
		wg.Go(func() {
			if err := l.CountDown(ctx); err != nil {
				t.Errorf("CountDown: %v", err)
			}
			down.Add(1)
		})
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	wg.Wait()
	if d := down.Load(); d != 3 {
		t.Fatalf("Wait returned with %d CountDowns done, want 3", d)
	}
	if n, err := waiter.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count after opening = %d, %v; want 0", n, err)
	}
	// A CountDown on an open latch does nothing.
	if err := recipe.NewLatch(cl.Client(t), "latch:a", 3).CountDown(ctx); err != nil {
		t.Fatalf("CountDown on an open latch: %v", err)
	}
	if err := recipe.NewLatch(cl.Client(t), "latch:a", 3).Wait(ctx); err != nil {
		t.Fatalf("Wait on an open latch: %v", err)
	}
}

// Counters that count down and close at once wait for each other and for
// the waiter, then leave nothing behind.
func TestRecipeLatchCloseWaitsForWaiters(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	c := cl.Client(t)
	waited := make(chan error, 1)
	go func() { waited <- recipe.NewLatch(c, "latch:c", 2).Wait(ctx) }()
	for {
		st, err := c.State(ctx, "latch:c/waiting")
		if err != nil {
			t.Fatal(err)
		}
		if st.Held {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(20 * time.Millisecond) // a condition polled, not asserted after a sleep
	}
	var wg sync.WaitGroup
	for range 2 {
		l := recipe.NewLatch(cl.Client(t), "latch:c", 2)
		wg.Go(func() {
			if err := l.CountDown(ctx); err != nil {
				t.Errorf("CountDown: %v", err)
			}
			if err := l.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	wg.Wait()
	if n, err := recipe.NewLatch(c, "latch:c", 2).Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count once the counters closed = %d, %v; want 2 (a new round)", n, err)
	}
}

// Many processes counting a latch of 4 down at once take exactly 4
// permits: the rest find the latch open and do nothing.
func TestRecipeLatchConcurrentCountDown(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 10 {
		l := recipe.NewLatch(cl.Client(t), "latch:many", 4)
		wg.Go(func() {
			if err := l.CountDown(ctx); err != nil {
				t.Errorf("CountDown: %v", err)
			}
		})
	}
	wg.Wait()
	st, err := cl.Client(t).Semaphore("latch:many", 4).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.InUse != 4 || st.Permits != 4 {
		t.Fatalf("after 10 CountDowns of a latch of 4: %d of %d permits in use, want 4 of 4", st.InUse, st.Permits)
	}
}

func TestRecipeLatchBounds(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	c := cl.Client(t)
	for _, n := range []int{0, -1} {
		l := recipe.NewLatch(c, "latch:b", n)
		if err := l.CountDown(ctx); !errors.Is(err, recipe.ErrInvalid) {
			t.Fatalf("count %d: CountDown = %v, want ErrInvalid", n, err)
		}
		if err := l.Wait(ctx); !errors.Is(err, recipe.ErrInvalid) {
			t.Fatalf("count %d: Wait = %v, want ErrInvalid", n, err)
		}
	}
	l := recipe.NewLatch(c, "latch:b", 2)
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recipe.NewLatch(c, "latch:b", 5).CountDown(ctx); !errors.Is(err, client.ErrPermitsMismatch) {
		t.Fatalf("CountDown with another count = %v, want ErrPermitsMismatch", err)
	}
	expectBlocked(t, "Wait on a latch at 1", l.Wait)
	// Close on a latch that does not open withdraws when ctx ends: the
	// latch counts from 2 again.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := l.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close of a latch at 1 = %v, want it to withdraw at the deadline", err)
	}
	if n, err := l.Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count after Close = %d, %v; want 2", n, err)
	}
}

func TestRecipeLatchMasterChange(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	a := recipe.NewLatch(cl.Client(t), "latch:m", 2)
	if err := a.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := recipe.NewLatch(cl.Client(t), "latch:m", 2)
	waited := make(chan error, 1)
	go func() { waited <- waiter.Wait(ctx) }()
	stopMaster(t, cl, "latch:m")
	b := recipe.NewLatch(cl.Client(t), "latch:m", 2)
	if err := retry(ctx, func() error { return b.CountDown(ctx) }); err != nil {
		t.Fatalf("CountDown after the master stopped: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait across the master change: %v", err)
	}
	// a's CountDown survived the master change: the count is 0, not 1.
	if n, err := waiter.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v; want 0", n, err)
	}
}

func TestRecipeBarrier(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	b := recipe.NewBarrier(cl.Client(t), "barrier:a")
	other := recipe.NewBarrier(cl.Client(t), "barrier:a")
	if err := other.Wait(ctx); err != nil {
		t.Fatalf("Wait on an unset barrier: %v", err)
	}
	if err := b.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Hold(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("Hold of a held barrier = %v, want ErrLocked", err)
	}
	if err := other.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Release by a non-holder = %v, want ErrNotHeld", err)
	}
	expectBlocked(t, "Wait on a held barrier", other.Wait)
	waited := make(chan error, 1)
	go func() { waited <- other.Wait(ctx) }()
	stopMaster(t, cl, "barrier:a")
	select {
	case err := <-waited:
		t.Fatalf("Wait returned while the barrier is held, across a master change: %v", err)
	default:
	}
	if err := retry(ctx, func() error { return b.Release(ctx) }); err != nil {
		t.Fatalf("Release after the master stopped: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func TestRecipeDoubleBarrier(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	if err := recipe.NewDoubleBarrier(cl.Client(t), "db:zero", 0).Enter(ctx); !errors.Is(err, recipe.ErrInvalid) {
		t.Fatalf("Enter with n=0 = %v, want ErrInvalid", err)
	}
	if err := recipe.NewDoubleBarrier(cl.Client(t), "db:a", 3).Leave(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Leave before Enter = %v, want ErrNotHeld", err)
	}
	const n = 3
	var entering, leaving atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		b := recipe.NewDoubleBarrier(cl.Client(t), "db:a", n)
		wg.Go(func() {
			entering.Add(1)
			if err := b.Enter(ctx); err != nil {
				t.Errorf("Enter: %v", err)
				return
			}
			if e := entering.Load(); e != n {
				t.Errorf("Enter returned with %d of %d participants entering", e, n)
			}
			if i == 0 { // between Enter and Leave
				if err := cl.StopNode(cl.MasterOf("db:a")); err != nil {
					t.Errorf("stop the master: %v", err)
				}
			}
			leaving.Add(1)
			if err := retry(ctx, func() error { return b.Leave(ctx) }); err != nil {
				t.Errorf("Leave: %v", err)
				return
			}
			if l := leaving.Load(); l != n {
				t.Errorf("Leave returned with %d of %d participants leaving", l, n)
			}
		})
	}
	wg.Wait()
}

func TestRecipeDoubleBarrierMasterChangeBeforeFull(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	first := recipe.NewDoubleBarrier(cl.Client(t), "db:m", 2)
	entered := make(chan error, 1)
	go func() { entered <- first.Enter(ctx) }()
	// The first participant holds its permit and waits for the second.
	probe := cl.Client(t).Semaphore("db:m", 2)
	for {
		st, err := probe.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.InUse == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(20 * time.Millisecond) // a condition polled, not asserted after a sleep
	}
	stopMaster(t, cl, "db:m")
	second := recipe.NewDoubleBarrier(cl.Client(t), "db:m", 2)
	if err := retry(ctx, func() error { return second.Enter(ctx) }); err != nil {
		t.Fatalf("second Enter after the master stopped: %v", err)
	}
	if err := <-entered; err != nil {
		t.Fatalf("first Enter across the master change: %v", err)
	}
	left := make(chan error, 1)
	go func() { left <- first.Leave(ctx) }()
	if err := second.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-left; err != nil {
		t.Fatal(err)
	}
}

// A master cut off from its peers (a paused master, as its peers see it)
// loses the group after its lease; the latch's waiter and a later
// CountDown go on with the new master.
func TestRecipeLatchIsolatedMaster(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	a := recipe.NewLatch(cl.Client(t), "latch:iso", 2)
	if err := a.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := recipe.NewLatch(cl.Client(t), "latch:iso", 2)
	waited := make(chan error, 1)
	go func() { waited <- waiter.Wait(ctx) }()
	old := cl.MasterOf("latch:iso")
	if err := cl.Isolate(old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Heal(old) })
	for cl.MasterOf("latch:iso") == old && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond) // a condition polled, not asserted after a sleep
	}
	b := recipe.NewLatch(cl.Client(t), "latch:iso", 2)
	if err := retry(ctx, func() error { return b.CountDown(ctx) }); err != nil {
		t.Fatalf("CountDown with the old master isolated: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait across the isolation: %v", err)
	}
}
