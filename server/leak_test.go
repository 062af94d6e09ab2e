package server

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/paxlock/paxlock/internal/testutil"
)

// TestMain fails the package's tests when any goroutine started by them
// outlives them: whatever a node starts (relays, namespace installs,
// timers, the paxos host and its sync goroutine), Stop must end. gnet's
// default worker pool (ants) starts two goroutines of its own when the
// package is loaded and memberlist leaves a probe in flight for up to one
// probe interval after Shutdown; testutil.LibraryGoroutines names them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.LibraryGoroutines()...)
}
