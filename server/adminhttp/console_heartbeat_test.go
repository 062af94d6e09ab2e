package adminhttp

import (
	"testing"
	"time"
)

// TestHeartbeatWithinWriteTimeout: a quiet /events stream speaks at
// least every consoleHeartbeat, and within half a shorter write timeout,
// but never more often than it looks for changes.
func TestHeartbeatWithinWriteTimeout(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{0, consoleHeartbeat},
		{time.Minute, consoleHeartbeat},
		{30 * time.Second, consoleHeartbeat},
		{10 * time.Second, 5 * time.Second},
		{time.Second, consoleInterval},
		{time.Millisecond, consoleInterval},
	} {
		if got := heartbeat(c.timeout); got != c.want {
			t.Errorf("heartbeat(%v) = %v, want %v", c.timeout, got, c.want)
		}
	}
}
