package client

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// TestSleepOrMove: a routing failure's pause is not cut short by views
// that leave the key's master where it was (a failover's pushes for other
// groups), only by one that moves it.
func TestSleepOrMove(t *testing.T) {
	t.Parallel()
	c := &Client{done: make(chan struct{}), stopped: make(chan struct{}), log: slog.New(slog.DiscardHandler),
		waits: map[uint64]*waiter{}, watches: map[uint64]*Watcher{}}
	ch := make(chan struct{})
	c.viewCh.Store(&ch)
	view := func(version uint64, master string) *wire.View {
		return &wire.View{Version: version, Groups: []wire.GroupView{{Master: 1, Addr: master}}}
	}
	c.updateView(view(1, "a:1"))
	const hash = 0
	ctx := context.Background()

	// Views that keep the master: the pause runs its course.
	viewCh := c.viewChanged()
	go func() {
		for v := uint64(2); v < 6; v++ {
			c.updateView(view(v, "a:1"))
			// Spreads the views over the pause, not a wait: views
			// that came sooner would end a wrong pause sooner still.
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	const pause = 300 * time.Millisecond
	if early, err := c.sleepOrMove(ctx, pause, viewCh, hash, "a:1"); err != nil || early {
		t.Fatalf("sleepOrMove: early %v, %v; want the whole pause", early, err)
	}
	if el := time.Since(start); el < pause {
		t.Fatalf("pause ended after %v by views that kept the master, want %v", el, pause)
	}

	// A view that moves it ends the pause at once.
	viewCh = c.viewChanged()
	done := make(chan error, 1)
	go func() {
		early, err := c.sleepOrMove(ctx, time.Minute, viewCh, hash, "a:1")
		if err == nil && !early {
			err = errors.New("not reported early")
		}
		done <- err
	}()
	c.updateView(view(7, "b:2"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a view moving the master did not end the pause")
	}

	// A move between the attempt and the pause: no pause at all.
	viewCh = c.viewChanged()
	c.updateView(view(8, "c:3"))
	start = time.Now()
	if early, err := c.sleepOrMove(ctx, time.Minute, viewCh, hash, "b:2"); err != nil || !early {
		t.Fatalf("sleepOrMove: early %v, %v; want early", early, err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Fatalf("paused %v though the master had moved", el)
	}
}
