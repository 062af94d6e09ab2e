package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestSlowConsumerClosed: a client that stops reading while its key churns
// (a continuous watch on it) and while it keeps sending requests has its
// connection closed once the replies and pushes it did not read pass
// MaxOutput; the node counts it and keeps serving everyone else.
func TestSlowConsumerClosed(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	tc := startClusterWith(t, 3, func(c *Config) { c.MaxOutput = limit })
	churn := newClient(t, tc)
	ctx := ctxT(t)
	const key = "slow"

	v := churn.View()
	addr, ok := v.MasterAddr(wire.GroupOf(wire.KeyHash("ns", key), len(v.Groups)))
	if !ok {
		t.Fatal("no master for the key's group")
	}
	node := -1
	for i, cfg := range tc.cfgs {
		if cfg.self().Client == addr {
			node = i
		}
	}
	if node < 0 {
		t.Fatalf("master address %s is no node's", addr)
	}
	s := tc.nodes[node]

	// A small receive buffer, so that the kernel takes little of what the
	// node sends before the node has to hold it.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	frame := func(typ wire.Type, id uint64, m wire.Message) []byte {
		b, err := wire.AppendFrame(nil, typ, id, m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	br := bufio.NewReader(nc)
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	var id uint64
	call := func(typ wire.Type, m wire.Message) wire.Message {
		id++
		if _, err := nc.Write(frame(typ, id, m)); err != nil {
			t.Fatal(err)
		}
		f, _, err := wire.ReadFrame(br, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := wire.Decode(f.Type, f.Body)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if r, err := testutil.ScramHello(call, "ns", "s3cret", testKey(0x51)); err != nil || r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %v %v", r, err)
	}
	// From here on the client reads nothing.
	if _, err := nc.Write(frame(wire.TypeWatch, 3, &wire.Watch{Key: key, WatchID: 1, Flags: wire.FlagContinuous, MaxWaitMs: wire.WaitForever})); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Add(2)
	go func() { // the key churns: every change pushes a watch event
		defer wg.Done()
		m := churn.Mutex(key)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m.TryLock(ctx) == nil {
				_ = m.Unlock(ctx)
			}
		}
	}()
	go func() { // and the client keeps asking, never reading the answers
		defer wg.Done()
		var batch []byte
		for id := uint64(3); ; {
			batch = batch[:0]
			for range 256 {
				batch, _ = wire.AppendFrame(batch, wire.TypeState, id, &wire.State{Key: key})
				id++
			}
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, err := nc.Write(batch)
			select {
			case <-stop:
				return
			default:
			}
			var ne net.Error
			if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
				return // closed by the node
			}
		}
	}()

	waitFor(t, "the node to close the slow consumer", func() bool { return s.stats.slowConsumers.Load() > 0 })
	// The connection ends: what the kernel buffered drains, then EOF or a
	// reset, never the read deadline.
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, br); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the closed connection (a deadline error: it was not closed): %v", err)
	}
	if n := s.stats.slowConsumers.Load(); n != 1 {
		t.Fatalf("%d slow consumers counted, want 1", n)
	}

	// The node still serves the other client, and says what happened. (A
	// loaded -race run may have cost the group its master meanwhile: the
	// answer may follow a failover.)
	waitFor(t, "the other client's State to be answered", func() bool {
		_, err := churn.State(ctx, key)
		return err == nil
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tc.cfgs[node].AdminAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "paxlock_slow_consumers_total 1\n") {
		t.Fatalf("metrics do not count the slow consumer:\n%s", body)
	}
}
