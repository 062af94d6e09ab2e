package clienttests_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/paxlock/paxlock/internal/testutil"
)

// TestMain stops the examples' shared cluster after every test and
// example, then fails the package when a goroutine that a client or node
// started outlives it: whatever they start, Close and Stop must end.
func TestMain(m *testing.M) {
	code := m.Run()
	if exampleCluster != nil {
		_ = exampleCluster.Close()
	}
	if code == 0 {
		if err := goleak.Find(testutil.LibraryGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
