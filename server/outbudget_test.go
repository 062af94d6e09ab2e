package server

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestOutputBudget: with either client listener, four connections that
// pipeline GetViews and never read take the node past max_output_total
// (1 MiB) long before their own bound (8 MiB each): each is closed as a
// slow consumer for the node's budget, while a connection that reads its
// replies has every request answered throughout; the node's queued
// output (paxlock_output_queued_bytes) returns to 0 once every
// connection has closed.
func TestOutputBudget(t *testing.T) {
	t.Parallel()
	for _, l := range []string{ListenerNetpoll, ListenerGnet} {
		t.Run(l, func(t *testing.T) { testOutputBudget(t, l) })
	}
}

func testOutputBudget(t *testing.T, listener string) {
	const budget, hogs = 1 << 20, 4
	tc := startClusterWith(t, 1, func(c *Config) {
		c.ClientListener = listener
		c.MaxOutputTotal = budget
		c.PreAuthMaxOutput = 8 << 20 // the node's bound, not the connection's, is the one reached
		c.AuthTimeout = Duration(time.Hour)
	})
	s := tc.nodes[0]
	addr := s.cfg.self().Client
	reader := dialRaw(t, addr)
	if r := reader.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	var batch []byte
	for id := uint64(1); id <= 200; id++ {
		batch = append(batch, mustFrame(t, wire.TypeGetView, id, &wire.GetView{})...)
	}
	slow := s.stats.slowConsumers.Load()
	hc := make([]net.Conn, hogs)
	for i := range hc {
		c := smallRcvDial(t, addr)
		hc[i] = c
		go func() { // ends when the node closes c (or at the test's end)
			for {
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write(batch); err != nil {
					return
				}
			}
		}()
	}
	answered := 0
	var peak int64
	deadline := time.Now().Add(2 * time.Minute)
	for s.outBudget.closes.Load() < hogs {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d non-reading connections closed for the budget in 2m", s.outBudget.closes.Load(), hogs)
		}
		if _, ok := reader.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View); !ok {
			t.Fatal("the reading connection's GetView not answered with a view")
		}
		answered++
		peak = max(peak, s.outBudget.queued.Load())
	}
	for _, c := range hc {
		waitClosed(t, c)
	}
	if _, ok := reader.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View); !ok {
		t.Fatal("the reading connection not served after the budget's closes")
	}
	if n := s.stats.slowConsumers.Load() - slow; n != hogs {
		t.Fatalf("slow consumers counted: %d, want %d", n, hogs)
	}
	t.Logf("%s: %d requests of the reading connection answered while %d non-reading ones were closed; node's queued output seen up to %d bytes (budget %d)",
		listener, answered, hogs, peak, budget)
	_ = reader.c.Close()
	testutil.Eventually(t, 30*time.Second, func() bool { return s.nconns.Load() == 0 }, "every connection closed")
	if q := s.outBudget.queued.Load(); q != 0 {
		t.Fatalf("node's queued output %d bytes with no connection open, want 0", q)
	}
}

// TestOutputBudgetDefault: max_output_total defaults to 1 GiB and is
// read from its JSON key.
func TestOutputBudgetDefault(t *testing.T) {
	t.Parallel()
	var l ConnLimits
	l.setDefaults(1<<20, 16<<20)
	if l.MaxOutputTotal != 1<<30 {
		t.Fatalf("default max_output_total %d, want 1 GiB", l.MaxOutputTotal)
	}
	var c Config
	if err := json.Unmarshal([]byte(`{"max_output_total": 5242880}`), &c); err != nil {
		t.Fatal(err)
	}
	c.ConnLimits.setDefaults(1<<20, 16<<20)
	if c.MaxOutputTotal != 5<<20 {
		t.Fatalf("max_output_total %d, want the configured 5 MiB", c.MaxOutputTotal)
	}
}
