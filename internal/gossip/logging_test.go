package gossip

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/internal/testutil"
)

// TestMemberlistLogger: memberlist's bracketed levels become slog levels,
// and the closed-socket errors of its own Stop are only Debug.
func TestMemberlistLogger(t *testing.T) {
	var buf testutil.Buffer
	l := memberlistLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Print("[WARN] memberlist: Was able to connect to n2 over TCP but UDP probes failed")
	l.Print("[ERR] memberlist: Failed to send gossip to 127.0.0.1:7402: write udp 127.0.0.1:7403->127.0.0.1:7402: use of closed network connection")
	l.Print("[ERR] memberlist: Failed fallback TCP ping: timeout 1s")
	l.Print("[DEBUG] memberlist: Stream connection from=127.0.0.1:1234")
	out := buf.String()
	for _, want := range []string{"level=WARN msg=\"Was able to connect", "level=ERROR msg=\"Failed fallback TCP ping", "component=memberlist"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"use of closed network connection", "Stream connection"} {
		if strings.Contains(out, not) {
			t.Errorf("log at Info shows %q:\n%s", not, out)
		}
	}
}
