package main

import (
	"context"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/server"
)

// startOpsNode starts a one-node cluster on loopback serving namespace
// "ops" (secret "ops-secret"), ready when it returns and shut down when
// the test ends, and returns its client and admin addresses.
func startOpsNode(t *testing.T) (clientAddr, adminAddr string) {
	t.Helper()
	a := freeAddrs(t, 4)
	cfg := server.Config{
		NodeID:     1,
		Nodes:      []server.NodeAddr{{ID: 1, Peer: a[0], Client: a[1], Gossip: a[2], Admin: a[3]}},
		AdminAddr:  a[3],
		DataDir:    t.TempDir(),
		Namespaces: []server.Namespace{{Name: "ops", Secret: "ops-secret"}},
		Groups:     3,
		EventLoops: 1,
		Lease:      server.Duration(500 * time.Millisecond),
		Heartbeat:  server.Duration(50 * time.Millisecond),
	}
	runNode(t, cfg)
	return a[1], a[3]
}

// runNode starts a node of cfg, ready when it returns and shut down when
// the test ends.
func runNode(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	srv, err := server.New(cfg, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	if err := srv.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}
