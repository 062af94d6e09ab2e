package testutil

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// ErrorCounter is a slog.Handler that counts the error records it
// receives, by message, and drops everything else: a test's check that a
// failure was logged once, and not once per retry.
type ErrorCounter struct {
	mu     sync.Mutex
	errors map[string]int
}

// NewErrorCounter returns an empty ErrorCounter.
func NewErrorCounter() *ErrorCounter { return &ErrorCounter{errors: map[string]int{}} }

// Enabled reports whether l is an error level.
func (c *ErrorCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

// Handle counts r.
func (c *ErrorCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.errors[r.Message]++
	c.mu.Unlock()
	return nil
}

// WithAttrs returns c: attributes are not counted.
func (c *ErrorCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

// WithGroup returns c: groups are not counted.
func (c *ErrorCounter) WithGroup(string) slog.Handler { return c }

// Count returns how many error records had a message starting with
// prefix.
func (c *ErrorCounter) Count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.errors {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}
