package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when any goroutine started by them
// outlives them: whatever a client starts, Close must end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
