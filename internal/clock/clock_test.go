package clock

import (
	"sync"
	"testing"
	"time"
)

var _ Clock = Real{}

func TestFake(t *testing.T) {
	c := NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
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
