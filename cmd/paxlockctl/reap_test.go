package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// runMarkerEnv is set in the test binary's environment (TestMain) to its
// process id. A run form's CMD inherits paxlockctl's environment, and what
// CMD starts inherits CMD's, so every process the tests' run forms started
// carries it, in a process group of its own or orphaned: leftoverRuns
// finds them in /proc, whether or not paxlockctl waited for them.
const runMarkerEnv = "PAXLOCKCTL_TEST_RUN"

// leftover is a process that a run form of this test binary started and
// that is still running.
type leftover struct {
	pid, pgid int
	cmdline   string
}

func (l leftover) String() string {
	return fmt.Sprintf("pid %d (group %d): %s", l.pid, l.pgid, l.cmdline)
}

// reapRuns kills, when t ends, what t's run forms left running: after a
// test that failed (a run form may still be waiting on CMD) it logs them,
// after one that passed it fails t, since a run form that returned must
// leave nothing behind. Run forms run only in tests that are not
// parallel (startNode sets the environment), so what is running when t
// ends is t's.
func reapRuns(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		left := killRuns()
		if len(left) == 0 {
			return
		}
		report := t.Errorf
		if t.Failed() {
			report = t.Logf
		}
		for _, l := range left {
			report("a run form's process was still running when the test ended, killed: %v", l)
		}
	})
}

// reapBeforeTimeout kills the run forms' processes shortly before the
// binary's -test.timeout panics it: the panic runs no cleanup, and a
// CMD in a process group of its own would outlive the binary.
func reapBeforeTimeout(timeout time.Duration) {
	if timeout <= 0 {
		return
	}
	time.AfterFunc(max(timeout-5*time.Second, timeout*9/10), func() {
		for _, l := range killRuns() {
			fmt.Fprintf(os.Stderr, "paxlockctl tests: about to time out: killed %v\n", l)
		}
	})
}

// asMainSignals makes the test binary handle SIGINT and SIGTERM until t
// ends, as paxlockctl's main does: a command a run form starts meanwhile
// gets both at their defaults. A process started with SIGINT ignored (a
// background job of a non-interactive shell, as a CI runner may start go
// test) passes that on to its children otherwise, and a shell cannot trap
// a signal that was ignored when it started: CMD would ignore the SIGINT
// paxlockctl forwards. A signal the binary gets meanwhile is reported.
func asMainSignals(t *testing.T) {
	c := make(chan os.Signal, 4)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	t.Cleanup(func() {
		signal.Stop(c)
		close(c)
		for s := range c {
			t.Errorf("the test binary got %v while the test ran", s)
		}
	})
}
