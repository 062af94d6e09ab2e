package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// TestHoldsStreamsOwnLosses: a Holds stream of an owner is told, without
// polling, when one of its holds expires, and is never told of another
// owner's: the other owner's hold expires before the owner's second one,
// whose loss is the stream's next event. The stream is a hint (a master
// change between the grant and the expiry sends the loss to no session,
// docs/api.md), so each expiry is tried on up to three keys, and at least
// one of them must be reported.
func TestHoldsStreamsOwnLosses(t *testing.T) {
	c := cluster(t)
	cl := c.client(1, testNS, testSecret)
	ctx := tctx(t)
	stream, err := cl.Holds(ctx, connect.NewRequest(&paxlockv1.HoldsRequest{Owner: "h"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	_ = stream.ResponseHeader() // the stream is open on the node
	events := make(chan *paxlockv1.HoldEvent, 16)
	go func() {
		defer close(events)
		for stream.Receive() {
			events <- stream.Msg()
		}
	}()
	// lose takes a hold of key-1, key-2, ... until the stream reports
	// one's expiry; an event of another owner's key fails the test.
	lose := func(key string) {
		t.Helper()
		for try := 1; try <= 3; try++ {
			k := fmt.Sprintf("%s-%d", key, try)
			a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: k, Owner: "h", TtlMs: 1000})
			if err != nil {
				t.Fatal(err)
			}
			timeout := time.After(8 * time.Second)
			for waiting := true; waiting; {
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatalf("%s: the stream ended: %v", k, stream.Err())
					}
					if strings.HasPrefix(ev.Key, "holds-other") {
						t.Fatalf("event %v: another owner's loss on the stream", ev)
					}
					if ev.Key == k {
						if ev.Token != a.Token || ev.Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRED {
							t.Fatalf("event %v, want EXPIRED of %s token %d", ev, k, a.Token)
						}
						return
					}
					// a late report of an earlier try's key
				case <-timeout:
					t.Logf("%s: no loss reported in 8 s (its group's master changed?); trying another key", k)
					waiting = false
				}
			}
		}
		t.Fatalf("none of three expiries of %s-N reported on the owner's stream", key)
	}
	lose("holds-1")
	// Another owner's hold expires, seen by a watch (the master pushes
	// the holder's Lost before it tells the watches).
	o, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "holds-other", Owner: "someone-else", TtlMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Watch(ctx, connect.NewRequest(&paxlockv1.WatchRequest{Key: "holds-other", Token: o.Token}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Receive() || w.Msg().Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRED {
		t.Fatalf("watch of the other owner's hold: %v %v", w.Msg(), w.Err())
	}
	lose("holds-2")
}

// TestHoldsTimeout: max_wait_ms ends the stream with a TIMEOUT event.
func TestHoldsTimeout(t *testing.T) {
	c := cluster(t)
	stream, err := c.client(0, testNS, testSecret).Holds(tctx(t), connect.NewRequest(&paxlockv1.HoldsRequest{Owner: "h", MaxWaitMs: 200}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT {
		t.Fatalf("first event %v (%v), want TIMEOUT", stream.Msg(), stream.Err())
	}
	if stream.Receive() {
		t.Fatalf("an event after TIMEOUT: %v", stream.Msg())
	}
}

// TestHoldsStreamsForceUnlock: an operator's force-unlock of a hold is
// streamed to its owner as REVOKED, and the owner's Release acknowledges
// it.
func TestHoldsStreamsForceUnlock(t *testing.T) {
	c := cluster(t)
	cl := c.client(2, testNS, testSecret)
	ctx := tctx(t)
	stream, err := cl.Holds(ctx, connect.NewRequest(&paxlockv1.HoldsRequest{Owner: "f"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	_ = stream.ResponseHeader()
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "holds-forced", Owner: "f", TtlMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	// The force-unlock answers once the holder acknowledged (or its wait
	// ran out, 202): in the background, while the stream is read.
	unlocked := make(chan int, 1)
	go func() {
		body, _ := json.Marshal(map[string]string{"namespace": testNS, "key": "holds-forced"})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.nodes[0].Config().Nodes[0].Admin+"/locks/unlock", bytes.NewReader(body))
		if err != nil {
			unlocked <- 0
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			unlocked <- 0
			return
		}
		_ = resp.Body.Close()
		unlocked <- resp.StatusCode
	}()
	if !stream.Receive() {
		t.Fatalf("the stream ended: %v", stream.Err())
	}
	if ev := stream.Msg(); ev.Key != "holds-forced" || ev.Token != a.Token || ev.Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_REVOKED {
		t.Fatalf("event %v, want REVOKED of token %d", ev, a.Token)
	}
	_, _ = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "holds-forced", Owner: "f", Token: a.Token}))
	if code := <-unlocked; code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("force unlock: HTTP %d", code)
	}
}

// TestEventKindHoldLimit: a hold ended at its maximum hold time reaches
// the API's Holds and Watch streams as a revocation with max_hold set (a
// client that knows no max_hold still sees the end); the other events
// keep their kinds, without max_hold.
func TestEventKindHoldLimit(t *testing.T) {
	t.Parallel()
	for ev, want := range map[wire.Event]paxlockv1.WatchEventKind{
		wire.EventHoldLimit: paxlockv1.WatchEventKind_WATCH_EVENT_KIND_REVOKED,
		wire.EventRevoked:   paxlockv1.WatchEventKind_WATCH_EVENT_KIND_REVOKED,
		wire.EventExpired:   paxlockv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRED,
		wire.EventMoved:     paxlockv1.WatchEventKind_WATCH_EVENT_KIND_UNSPECIFIED,
	} {
		if got := eventKind(ev); got != want {
			t.Errorf("eventKind(%v) = %v, want %v", ev, got, want)
		}
		if got := watchEvent(&wire.WatchEvent{Event: ev}).MaxHold; got != (ev == wire.EventHoldLimit) {
			t.Errorf("watchEvent of %v: max_hold %v", ev, got)
		}
	}
}
