package group

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeClock is a manual Clock: time moves only when a test calls Advance,
// which runs every function that has come due, in deadline order.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d; a d that is not positive runs f at
// once (on the caller's goroutine, as the worker's timer callback only
// posts an event).
func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	if d <= 0 {
		t.done = true
		c.mu.Unlock()
		f()
		return t
	}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	return true
}

// Advance moves the clock forward by d and runs what came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(c.now):
			t.done = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	clear(c.timers[len(keep):])
	c.timers = keep
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

func TestFakeClock(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	t0 := c.Now()
	var mu sync.Mutex
	var got []int
	add := func(i int) func() {
		return func() { mu.Lock(); got = append(got, i); mu.Unlock() }
	}
	c.AfterFunc(3*time.Second, add(3))
	c.AfterFunc(time.Second, add(1))
	stopped := c.AfterFunc(2*time.Second, add(2))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true, then false")
	}
	c.Advance(999 * time.Millisecond)
	if len(got) != 0 {
		t.Fatalf("fired early: %v", got)
	}
	c.Advance(5 * time.Second)
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("fired %v, want [1 3]", got)
	}
	c.AfterFunc(0, add(0))
	if len(got) != 3 || got[2] != 0 {
		t.Fatalf("a due function did not run at once: %v", got)
	}
	if d := c.Now().Sub(t0); d != 5999*time.Millisecond {
		t.Fatalf("clock moved %v", d)
	}
}
