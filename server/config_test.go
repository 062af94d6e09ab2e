package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

// TestStartLogRedactsSecrets starts a node with a log in text and in JSON
// and checks that the effective configuration is logged with the
// namespace names and defaults filled in, and that no secret appears
// anywhere in the log.
func TestStartLogRedactsSecrets(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-do-not-log"
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf testutil.Buffer
			var h slog.Handler = slog.NewTextHandler(&buf, nil)
			if format == "json" {
				h = slog.NewJSONHandler(&buf, nil)
			}
			addrs := freePorts(t, 3)
			cfg := Config{
				NodeID:     1,
				Nodes:      []NodeAddr{{ID: 1, Peer: addrs[0], Client: addrs[1]}},
				AdminAddr:  addrs[2],
				DataDir:    t.TempDir(),
				Namespaces: []Namespace{{Name: "orders", Secret: secret}},
				EventLoops: 1,
			}
			s, err := New(cfg, slog.New(h))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if strings.Contains(out, secret) {
				t.Fatalf("the secret appears in the log:\n%s", out)
			}
			// The only node masters every group: each election is logged,
			// and no step-down.
			if n := strings.Count(out, "group master elected"); n != 15 {
				t.Errorf("%d groups logged as elected on the only node, want 15:\n%s", n, out)
			}
			if strings.Contains(out, "stepped down") {
				t.Errorf("a step-down logged on the only node:\n%s", out)
			}
			var line string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "effective config") {
					line = l
				}
			}
			if line == "" {
				t.Fatalf("no effective config in the log:\n%s", out)
			}
			if format == "text" {
				for _, w := range []string{`orders`, Redacted, `max_ttl`, `24h0m0s`} {
					if !strings.Contains(line, w) {
						t.Errorf("effective config line lacks %q: %s", w, line)
					}
				}
				return
			}
			var rec struct {
				Config Config `json:"config"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("effective config line is not JSON with a config object: %v: %s", err, line)
			}
			if len(rec.Config.Namespaces) != 1 || rec.Config.Namespaces[0].Name != "orders" || rec.Config.Namespaces[0].Secret != Redacted {
				t.Errorf("logged namespaces %+v, want orders with its secret %s", rec.Config.Namespaces, Redacted)
			}
			if rec.Config.Groups != 15 || rec.Config.NodeID != 1 {
				t.Errorf("logged config %+v: want defaults filled in (15 groups) and node 1", rec.Config)
			}
		})
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(p, []byte(`{"node_id": 1, "data_dir": "d", "heartbeet": "50ms"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), `unknown field "heartbeet"`) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Load: %v, want an error naming the file and the key heartbeet", err)
	}
	if err := os.WriteFile(p, []byte(`{"node_id": 1, "data_dir": "d", "heartbeat": "50ms"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil || c.Heartbeat != Duration(50*time.Millisecond) {
		t.Fatalf("Load: %+v, %v", c, err)
	}
}
