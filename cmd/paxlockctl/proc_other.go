//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// setProcessGroup does nothing where there are no process groups: CMD's
// own process is the one signalled.
func setProcessGroup(*exec.Cmd) {}

// signalGroup sends sig to CMD's process (where only os.Kill can be
// sent, any other signal fails).
func signalGroup(cmd *exec.Cmd, sig os.Signal) error {
	if sig == os.Kill {
		return cmd.Process.Kill()
	}
	return cmd.Process.Signal(sig)
}

// exitCodeOf is CMD's exit code (1 when it was not waited for).
func exitCodeOf(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return 1, ""
	}
	return ps.ExitCode(), ""
}

// signalName names sig.
func signalName(sig os.Signal) string { return sig.String() }
