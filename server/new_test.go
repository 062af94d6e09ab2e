package server

import (
	"net"
	"testing"
)

// TestNewUndoesOnFailure: a New whose last step fails (the peer port is
// taken) closes what the earlier ones opened: a New on the same data
// directory then opens its store, and nothing New started outlives it
// (TestMain's leak check).
func TestNewUndoesOnFailure(t *testing.T) {
	t.Parallel()
	ports := freePorts(t, 2)
	cfg := Config{NodeID: 1, Nodes: []NodeAddr{{ID: 1, Peer: ports[0], Client: ports[1]}}, DataDir: t.TempDir()}
	taken, err := net.Listen("tcp", ports[0])
	if err != nil {
		t.Fatal(err)
	}
	if s, err := New(cfg, testLogger()); err == nil {
		_ = s.Shutdown(t.Context())
		t.Fatal("New with its peer port taken: no error")
	}
	taken.Close()
	s, err := New(cfg, testLogger())
	if err != nil {
		t.Fatalf("New after a failed New on the same directory: %v", err)
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
