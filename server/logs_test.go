package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/gossip"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestAuthFailureLogged: a Hello with a wrong secret is logged with the
// namespace and the remote address, never the secret, and counted.
func TestAuthFailureLogged(t *testing.T) {
	t.Parallel()
	const wrong = "not-the-secret-do-not-log"
	var buf testutil.Buffer
	addrs := freePorts(t, 3)
	cfg := Config{
		NodeID:     1,
		Nodes:      []NodeAddr{{ID: 1, Peer: addrs[0], Client: addrs[1]}},
		AdminAddr:  addrs[2],
		DataDir:    t.TempDir(),
		Namespaces: []Namespace{{Name: "orders", Secret: "right"}},
		EventLoops: 1,
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func() { _ = s.Shutdown(context.Background()) }()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(ctx, client.Config{Registry: []string{addrs[1]}, Namespace: "orders", Secret: wrong, Logger: testLogger()}); err == nil {
		t.Fatal("a client with a wrong secret connected")
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(buf.String(), "client authentication failed")
	}, "no auth failure logged")
	log := buf.String()
	for _, want := range []string{"namespace=orders", "remote=127.0.0.1:"} {
		if !strings.Contains(log, want) {
			t.Errorf("auth failure log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, wrong) {
		t.Errorf("the log holds the secret:\n%s", log)
	}
	if got := sumOf(scrape(t, addrs[2]), "paxlock_auth_failures_total", nil); got < 1 {
		t.Errorf("paxlock_auth_failures_total = %v, want ≥ 1", got)
	}
}

// TestAuthFailureLogRateLimited: failures within authLogEvery of a logged
// one are counted, not logged, and the next logged one says how many.
func TestAuthFailureLogRateLimited(t *testing.T) {
	t.Parallel()
	var buf testutil.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}
	remote := "127.0.0.1:4242"
	why := errors.New("wrong proof")
	for range 5 {
		s.logAuthFailure("orders", remote, why)
	}
	if n := strings.Count(buf.String(), "client authentication failed"); n != 1 {
		t.Fatalf("5 failures in a burst logged %d times, want 1:\n%s", n, buf.String())
	}
	s.stats.authLogged.Store(time.Now().Add(-2 * authLogEvery).UnixNano()) // as if the burst were long ago
	buf.Take()
	s.logAuthFailure("orders", remote, why)
	if got := buf.String(); !strings.Contains(got, "suppressed=4") {
		t.Errorf("the next logged failure does not say 4 were suppressed: %s", got)
	}
}

// TestPeersUpDownLogged: membership changes log the peers that came up and
// went down, and nothing for this node or for peers never seen up.
func TestPeersUpDownLogged(t *testing.T) {
	t.Parallel()
	var buf testutil.Buffer
	g := &nodeGossip{s: &Server{cfg: Config{NodeID: 1}, log: slog.New(slog.NewTextHandler(&buf, nil))}, ids: []uint32{1, 2, 3}}
	g.logPeers(nil, map[uint32]bool{1: true, 2: true})
	if got := buf.Take(); !strings.Contains(got, `msg="peer up" peer=2`) || strings.Contains(got, "peer=3") || strings.Contains(got, "peer=1") {
		t.Errorf("first change logged %q, want peer 2 up only", got)
	}
	g.logPeers([]gossip.Member{{NodeMeta: gossip.NodeMeta{ID: 2}, State: gossip.StateSuspect}}, map[uint32]bool{1: true, 3: true})
	got := buf.Take()
	if !strings.Contains(got, `msg="peer down" peer=2 state=suspect`) || !strings.Contains(got, `msg="peer up" peer=3`) {
		t.Errorf("second change logged %q, want peer 2 down (suspect) and peer 3 up", got)
	}
	g.logPeers(nil, map[uint32]bool{1: true, 3: true})
	if got := buf.Take(); got != "" {
		t.Errorf("no change logged %q", got)
	}
}
