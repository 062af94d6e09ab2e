package clienttests_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// Watch every lock of a key prefix: the watch registers with every lock
// group's master and merges their events; a List resynchronises after
// an EventMoved.
func Example_clientWatchPrefix() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := connect(ctx)
	defer c.Close()

	events, err := c.WatchPrefix(ctx, "jobs/")
	if err != nil {
		log.Fatal(err)
	}
	m := c.Mutex("jobs/report-42")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	for ev := range events {
		switch ev.Type {
		case client.EventAcquired:
			fmt.Println("taken:", ev.Key)
			_ = m.Unlock(ctx)
		case client.EventReleased, client.EventExpired, client.EventRevoked:
			fmt.Println("free again:", ev.Key)
			cancel() // ends the watch: the channel closes
		case client.EventMoved:
			// A group's master changed: what changed meanwhile is in
			// c.List(ctx, "jobs/", "", 0).
		}
	}
	// Output:
	// taken: jobs/report-42
	// free again: jobs/report-42
}

// TestWatchPrefixCluster: against the examples' cluster, a prefix watch
// hears of the acquires of six keys under its prefix (hashed over the
// groups), each named, and an event of a key outside the prefix (each
// changed just before a watched one) that arrives meanwhile fails it
// (the group package's tests check the absence exactly); its channel
// closes when ctx ends.
func TestWatchPrefixCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := connect(ctx)
	defer c.Close()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events, err := c.WatchPrefix(wctx, "pw-cluster/")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 6 {
		outside := c.Mutex(fmt.Sprintf("pw-other/%d", i), client.TTL(time.Minute))
		if err := outside.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = outside.Unlock(context.Background()) }()
		k := fmt.Sprintf("pw-cluster/%d", i)
		m := c.Mutex(k, client.TTL(time.Minute))
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = m.Unlock(context.Background()) }()
		want[k] = true
	}
	for len(want) > 0 {
		select {
		case ev, ok := <-events:
			switch {
			case !ok:
				t.Fatal("events closed")
			case ev.Type == client.EventMoved:
				continue
			case !strings.HasPrefix(ev.Key, "pw-cluster/") || ev.Type != client.EventAcquired:
				t.Fatalf("event %+v, want acquires of pw-cluster/ keys", ev)
			}
			delete(want, ev.Key)
		case <-ctx.Done():
			t.Fatalf("no events for %v", want)
		}
	}
	stop()
	for range events { // closed once the watch ends
	}
}
