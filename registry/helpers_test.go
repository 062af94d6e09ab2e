package registry

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

// syncBuffer collects a test's logs; they are printed only if it fails.
// Logging straight to t.Log would panic when memberlist's goroutines log
// after the test returned.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	buf := &syncBuffer{}
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
