// Package testutil holds the helpers the client module's tests share:
// waiting for a condition instead of sleeping, and a logger that stays
// quiet. The root module's tests have their own (internal/testutil there):
// a module's internal packages are its own, and the client module must
// not require the root.
package testutil

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Eventually waits until cond returns true, polling it (every millisecond
// at first, backing off to every 20 ms), and fails t with "timed out after
// <timeout> waiting for <what>" when timeout passes first, what being
// format and args. Give a generous timeout: a loaded machine must pass,
// and a condition that holds returns at once. It calls t.Fatalf, so it
// must run on the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if err := Wait(timeout, cond); err != nil {
		t.Fatalf("%v waiting for %s", err, fmt.Sprintf(format, args...))
	}
}

// Wait is Eventually for goroutines other than the test's, and for callers
// that add what they know to the failure: it returns an error once timeout
// passes with cond still false, nil as soon as cond holds.
func Wait(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
	return nil
}

// Logger returns a logger for tests that discards everything, unless the
// environment variable PAXLOCK_TEST_LOG is set: then it writes text to
// standard error at debug level, to follow a failing test.
func Logger() *slog.Logger {
	if os.Getenv("PAXLOCK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
