package client

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/paxlock/paxlock/internal/testutil"
)

// TestMain fails the package's tests when any goroutine started by them
// outlives them: whatever a client or node starts, Close and Stop must end.
// The in-process server of validity_test.go uses gnet, whose default
// worker pool (ants) starts two goroutines of its own when the package is
// loaded; they live for the process and are not ours.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range AfterTests {
		f()
	}
	if code == 0 {
		if err := goleak.Find(testutil.LibraryGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// AfterTests run after every test and example, before the leak check:
// the examples' shared cluster stops there.
var AfterTests []func()
