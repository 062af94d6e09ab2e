package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/server"
)

// TestMaxHoldRevokes: a hold acquired with max_hold_ms and renewed all
// along is ended by its master at the bound: a Watch of the key reports
// REVOKED with max_hold set, and the next renewal finds no hold. The TTL
// (3 s, renewed every 500 ms) keeps the hold from expiring first on a
// loaded machine.
func TestMaxHoldRevokes(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(1, testNS, testSecret)
	ctx := tctx(t)
	stream, err := c.client(2, testNS, testSecret).Watch(ctx, connect.NewRequest(&paxlockv1.WatchRequest{Key: "maxhold", Continuous: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	_ = stream.ResponseHeader() // the watch is registered
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "maxhold", Owner: "mh", TtlMs: 3000, MaxHoldMs: 4000})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan *paxlockv1.WatchEvent, 16)
	go func() {
		defer close(events)
		for stream.Receive() {
			events <- stream.Msg()
		}
	}()
	renew := time.NewTicker(500 * time.Millisecond)
	defer renew.Stop()
	deadline := time.After(25 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the watch ended: %v", stream.Err())
			}
			if ev.Kind == paxlockv1.WatchEventKind_WATCH_EVENT_KIND_ACQUIRED {
				continue
			}
			if ev.Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_REVOKED || !ev.MaxHold || ev.Token != a.Token {
				t.Fatalf("event %v, want REVOKED with max_hold of token %d", ev, a.Token)
			}
			_, err := cl.Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: "maxhold", Owner: "mh", Token: a.Token, TtlMs: 3000}))
			if codeOfErr(err) != connect.CodeNotFound {
				t.Fatalf("renewal after the bound: %v, want NOT_FOUND", err)
			}
			return
		case <-renew.C:
			_, _ = cl.Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: "maxhold", Owner: "mh", Token: a.Token, TtlMs: 3000}))
		case <-deadline:
			t.Fatal("no revocation 25 s after a 4 s maximum hold time")
		}
	}
}

// TestMaxHoldBounds: max_hold_ms above 24 hours or below ttl_ms is
// refused INVALID_ARGUMENT and takes nothing; at the limit and at the TTL
// it is granted.
func TestMaxHoldBounds(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	for _, q := range []*paxlockv1.AcquireRequest{
		{Key: "mh-bound", Owner: "o", TtlMs: 5000, MaxHoldMs: wire.MaxHoldLimitMs + 1},
		{Key: "mh-bound", Owner: "o", TtlMs: 5000, MaxHoldMs: 4999},
	} {
		if _, err := acquire(ctx, cl, q); codeOfErr(err) != connect.CodeInvalidArgument {
			t.Fatalf("max_hold_ms %d with ttl_ms %d: %v, want INVALID_ARGUMENT", q.MaxHoldMs, q.TtlMs, err)
		}
		st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "mh-bound"}))
		if err != nil || st.Msg.State.Held {
			t.Fatalf("after a refused acquire: %v, %v; want the key free", st, err)
		}
	}
	for i, mh := range []uint32{wire.MaxHoldLimitMs, 5000} {
		k := fmt.Sprintf("mh-ok-%d", i)
		a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: k, Owner: "o", TtlMs: 5000, MaxHoldMs: mh})
		if err != nil {
			t.Fatalf("max_hold_ms %d: %v", mh, err)
		}
		if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: k, Owner: "o", Token: a.Token})); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPartialRelease: a holder of 3 of 3 permits keeps 1 with
// keep_permits, keeping its token; the waiter for 2 is granted by that
// release. Keeping more than held, or keep_permits on an exclusive lock,
// is INVALID_ARGUMENT and changes nothing.
func TestPartialRelease(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	sem := paxlockv1.LockKind_LOCK_KIND_SEMAPHORE
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "part", Owner: "a", Kind: sem, Permits: 3, Limit: 3, TtlMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := acquire(ctx, c.client(1, testNS, testSecret), &paxlockv1.AcquireRequest{Key: "part", Owner: "b", Kind: sem, Permits: 2, Limit: 3, TtlMs: 20000, WaitMs: 20000})
		granted <- err
	}()
	testutil.Eventually(t, 20*time.Second, func() bool {
		st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "part"}))
		return err == nil && st.Msg.State.QueueLen == 1
	}, "the waiter to queue")
	r, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "part", Owner: "a", Token: a.Token, KeepPermits: 1}))
	if err != nil || r.Msg.Permits != 1 {
		t.Fatalf("keep 1 of 3: %v, %v", r, err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter for 2: %v", err)
	}
	check := func(what string) {
		t.Helper()
		ct, err := cl.CheckToken(ctx, connect.NewRequest(&paxlockv1.CheckTokenRequest{Key: "part", Token: a.Token}))
		if err != nil || !ct.Msg.Current {
			t.Fatalf("%s: a's token: %v, %v; want current", what, ct, err)
		}
		st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "part"}))
		if err != nil || st.Msg.State.InUse != 3 {
			t.Fatalf("%s: %v, %v; want 3 permits in use", what, st, err)
		}
	}
	check("after the partial release")
	_, err = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "part", Owner: "a", Token: a.Token, KeepPermits: 2}))
	if codeOfErr(err) != connect.CodeInvalidArgument {
		t.Fatalf("keep 2 of 1: %v, want INVALID_ARGUMENT", err)
	}
	check("after keeping more than held")
	x, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "part-x", Owner: "a", TtlMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "part-x", Owner: "a", Token: x.Token, KeepPermits: 1}))
	if codeOfErr(err) != connect.CodeInvalidArgument {
		t.Fatalf("keep_permits on an exclusive lock: %v, want INVALID_ARGUMENT", err)
	}
	if ct, err := cl.CheckToken(ctx, connect.NewRequest(&paxlockv1.CheckTokenRequest{Key: "part-x", Token: x.Token})); err != nil || !ct.Msg.Current {
		t.Fatalf("the lock after a refused partial release: %v, %v; want held", ct, err)
	}
}

// prefixEvents reads a WatchPrefix stream into a channel.
func prefixEvents(stream *connect.ServerStreamForClient[paxlockv1.WatchEvent]) <-chan *paxlockv1.WatchEvent {
	ch := make(chan *paxlockv1.WatchEvent, 64)
	go func() {
		defer close(ch)
		for stream.Receive() {
			ch <- stream.Msg()
		}
	}()
	return ch
}

// TestWatchPrefix: a WatchPrefix stream reports the acquisition and the
// release of keys under its prefix, whichever node's master serves their
// groups, and nothing of a key outside it. A RESYNC (a master change on
// a loaded machine) may have dropped an event, so the scenario is run
// again on fresh keys, up to three times.
func TestWatchPrefix(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	for try := 1; ; try++ {
		if resynced := watchPrefixOnce(t, c, fmt.Sprintf("wp%d-", try)); !resynced {
			return
		}
		if try == 3 {
			t.Fatal("three tries resynced")
		}
	}
}

// watchPrefixOnce runs TestWatchPrefix's scenario under prefix and
// reports whether it saw a RESYNC before it was done.
func watchPrefixOnce(t *testing.T, c *apiCluster, prefix string) bool {
	ctx, cancel := context.WithCancel(tctx(t))
	defer cancel()
	stream, err := c.client(2, testNS, testSecret).WatchPrefix(ctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{Prefix: prefix}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	_ = stream.ResponseHeader() // every group's part is registered
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	events := prefixEvents(stream)
	cl := c.client(0, testNS, testSecret)
	if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "x" + prefix + "out", Owner: "p"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{} // "key kind" seen
	for i := range 8 {        // 8 keys: several groups, several masters
		k := fmt.Sprintf("%skey-%d", prefix, i)
		a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: k, Owner: "p", Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.client(1, testNS, testSecret).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: k, Owner: "p", Token: a.Token})); err != nil {
			t.Fatal(err)
		}
		want[k+" ACQUIRED"], want[k+" RELEASED"] = false, false
	}
	timeout := time.After(20 * time.Second)
	for seen := 0; seen < len(want); {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended: %v", stream.Err())
			}
			if ev.Kind == paxlockv1.WatchEventKind_WATCH_EVENT_KIND_RESYNC {
				return true
			}
			if !strings.HasPrefix(ev.Key, prefix) {
				t.Fatalf("event %v of a key outside the prefix %q", ev, prefix)
			}
			name := ev.Key + " " + strings.TrimPrefix(ev.Kind.String(), "WATCH_EVENT_KIND_")
			if done, ok := want[name]; !ok || done {
				t.Fatalf("event %v: not one of the scenario's, or twice", ev)
			}
			if ev.Kind == paxlockv1.WatchEventKind_WATCH_EVENT_KIND_ACQUIRED && (string(ev.Value) != "v" || ev.Holder == "") {
				t.Fatalf("acquired event %v without its holder and value", ev)
			}
			want[name] = true
			seen++
		case <-timeout:
			t.Fatalf("events seen after 20 s: %v", want)
		}
	}
	return false
}

// TestWatchPrefixBounds: a prefix over 1024 bytes is INVALID_ARGUMENT; ""
// (the whole namespace) is a prefix; max_wait_ms ends the stream with
// TIMEOUT.
func TestWatchPrefixBounds(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	long, err := cl.WatchPrefix(ctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{Prefix: strings.Repeat("p", wire.MaxKeyLen+1)}))
	if err == nil {
		for long.Receive() {
		}
		err = long.Err()
	}
	if codeOfErr(err) != connect.CodeInvalidArgument {
		t.Fatalf("a prefix of %d bytes: %v, want INVALID_ARGUMENT", wire.MaxKeyLen+1, err)
	}
	all, err := cl.WatchPrefix(ctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{MaxWaitMs: 300}))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	var last *paxlockv1.WatchEvent
	for all.Receive() {
		last = all.Msg()
	}
	if err := all.Err(); err != nil || last == nil || last.Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT {
		t.Fatalf("the whole namespace's watch for 300 ms: last event %v, %v; want TIMEOUT", last, err)
	}
}

// TestWatchPrefixNamespaceBound: on a node whose namespaces may keep 15
// prefix-watch places (one per lock group: one WatchPrefix), a second
// stream is refused RESOURCE_EXHAUSTED while the first lives and keeps
// nothing; once the first ends its places come back and a third stream
// opens.
func TestWatchPrefixNamespaceBound(t *testing.T) {
	t.Parallel()
	c, err := startCluster(1, func(_ string, cfg *server.Config) {
		cfg.MaxPrefixWatchesPerNamespace = wire.DefaultGroups
		for i := range cfg.Nodes {
			cfg.Nodes[i].ClientTLS = "" // no TLS here
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	fctx, endFirst := context.WithCancel(ctx)
	first, err := cl.WatchPrefix(fctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{Prefix: "b-"}))
	if err != nil {
		t.Fatal(err)
	}
	_ = first.ResponseHeader()
	if err := first.Err(); err != nil {
		t.Fatal(err)
	}
	second, err := cl.WatchPrefix(ctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{Prefix: "b-"}))
	if err == nil {
		for second.Receive() {
		}
		err = second.Err()
	}
	if codeOfErr(err) != connect.CodeResourceExhausted {
		t.Fatalf("a second prefix watch past the namespace's bound: %v, want RESOURCE_EXHAUSTED", err)
	}
	endFirst()
	_ = first.Close()
	testutil.Eventually(t, 20*time.Second, func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		third, err := cl.WatchPrefix(sctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{Prefix: "b-", MaxWaitMs: 100}))
		if err != nil {
			return false
		}
		defer third.Close()
		for third.Receive() {
		}
		return third.Err() == nil
	}, "a prefix watch after the first ended")
}

// TestWatchPrefixPoolExceedsConnBound: on a node whose connections may
// keep 15 prefix-watch places (one WatchPrefix: one per group), three
// streams of one namespace all open, over the sessions the lane opens for
// them: the per-connection bound does not bound the API's callers.
func TestWatchPrefixPoolExceedsConnBound(t *testing.T) {
	t.Parallel()
	c, err := startCluster(1, func(_ string, cfg *server.Config) {
		cfg.MaxPrefixWatchesPerConn = wire.DefaultGroups
		for i := range cfg.Nodes {
			cfg.Nodes[i].ClientTLS = "" // no TLS here
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	// Each stream lives 5 s from its registration, so the three overlap;
	// a refused one ends with its error instead of TIMEOUT.
	var streams []*connect.ServerStreamForClient[paxlockv1.WatchEvent]
	for range 3 {
		stream, err := cl.WatchPrefix(ctx, connect.NewRequest(&paxlockv1.WatchPrefixRequest{Prefix: "pool-", MaxWaitMs: 5000}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		_ = stream.ResponseHeader()
		streams = append(streams, stream)
	}
	for i, stream := range streams {
		var last *paxlockv1.WatchEvent
		for stream.Receive() {
			last = stream.Msg()
		}
		if err := stream.Err(); err != nil || last == nil || last.Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT {
			t.Fatalf("stream %d: last event %v, %v; want TIMEOUT", i, last, err)
		}
	}
	sessions := laneSessions(c.apis[0].svc, testNS)
	if sessions < 3 {
		t.Fatalf("%d sessions carry 3 prefix watches of 15 places each, 15 per connection", sessions)
	}
}
