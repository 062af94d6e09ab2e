package gossip

import (
	"log/slog"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

// testLogger collects a test's logs; they are printed only if it fails.
// Logging straight to t.Log would panic when memberlist's goroutines log
// after the test returned.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	buf := &testutil.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline. Tests wait on conditions, never on durations.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	if err := testutil.Wait(30*time.Second, func() bool {
		var ok bool
		ok, last = cond()
		return ok
	}); err != nil {
		t.Fatalf("%v waiting for %s; last: %s", err, what, last)
	}
}
