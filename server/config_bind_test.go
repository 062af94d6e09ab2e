package server

import (
	"net"
	"strings"
	"testing"
)

// TestBindHost starts a one-node cluster whose own addresses name a host
// that does not resolve (as a StatefulSet pod's name before its DNS
// record exists): without bind_host New cannot listen; with bind_host
// 127.0.0.1 the peer and client listeners bind it on the entry's ports
// and answer there.
func TestBindHost(t *testing.T) {
	t.Parallel()
	ports := freePorts(t, 2)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	name := "paxlock-0.bindhost.invalid"
	cfg := Config{NodeID: 1, DataDir: t.TempDir(), Nodes: []NodeAddr{{ID: 1,
		Peer: net.JoinHostPort(name, port(ports[0])), Client: net.JoinHostPort(name, port(ports[1]))}}}
	if s, err := New(cfg, testLogger()); err == nil {
		_ = s.Shutdown(t.Context())
		t.Fatal("New listening on an unresolvable host: no error")
	}
	cfg.DataDir = t.TempDir()
	cfg.BindHost = "127.0.0.1"
	s, err := New(cfg, testLogger())
	if err != nil {
		t.Fatalf("New with bind_host: %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start with bind_host: %v", err)
	}
	for _, a := range ports {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatalf("dial %s: %v", a, err)
		}
		_ = c.Close()
	}
}

func TestBindHostValidated(t *testing.T) {
	cfg := Config{NodeID: 1, DataDir: "d", BindHost: "any-interface",
		Nodes: []NodeAddr{{ID: 1, Peer: "127.0.0.1:1", Client: "127.0.0.1:2"}}}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "bind_host") {
		t.Fatalf("Validate with a bind_host that is no IP: %v", err)
	}
}
