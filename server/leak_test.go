package server

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestMain fails the package's tests when any goroutine started by them
// outlives them: whatever a node starts (relays, namespace installs,
// timers, the paxos host and its sync goroutine), Stop must end. gnet's
// default worker pool (ants) starts two goroutines of its own when the
// package is loaded and memberlist leaves a probe in flight for up to one
// probe interval after Shutdown; testutil.LibraryGoroutines names them.
//
// The admin token and the relay secret of the package's clusters come
// from their configurations' files only: the variables that would take
// precedence are cleared once here, so that the tests need no t.Setenv
// for it (which forbids t.Parallel).
func TestMain(m *testing.M) {
	for _, v := range []string{adminapi.TokenEnv, RelaySecretEnv} {
		if err := os.Unsetenv(v); err != nil {
			fmt.Fprintf(os.Stderr, "unset %s: %v\n", v, err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m, testutil.LibraryGoroutines()...)
}
