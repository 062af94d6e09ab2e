package testutil

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
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

// EventuallyWith is Eventually for a condition that also describes the
// state it found: the failure message ends with the description cond
// gave last ("; last: <state>"), so that a timeout says how far things
// got.
func EventuallyWith(t testing.TB, timeout time.Duration, cond func() (bool, string), format string, args ...any) {
	t.Helper()
	var last string
	if err := Wait(timeout, func() bool {
		var ok bool
		ok, last = cond()
		return ok
	}); err != nil {
		t.Fatalf("%v waiting for %s; last: %s", err, fmt.Sprintf(format, args...), last)
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

// FailureLogger returns a debug-level logger whose records t prints only
// if it fails. It does not log through t.Log, which panics once the test
// has returned: goroutines a test starts (memberlist's, for one) may
// still log after that.
func FailureLogger(t testing.TB) *slog.Logger {
	t.Helper()
	buf := &Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Buffer is a bytes.Buffer safe for concurrent writes: the sink of a
// test's logger, whose goroutines may write while the test reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Take returns everything written since the last Take and empties the
// buffer.
func (s *Buffer) Take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}
