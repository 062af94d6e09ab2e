//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// setProcessGroup makes CMD the leader of a process group of its own, so
// that a signal sent to the group reaches every process CMD starts (a
// shell script's commands too), as timeout(1) does.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to CMD's process group.
func signalGroup(cmd *exec.Cmd, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return cmd.Process.Signal(sig)
	}
	return syscall.Kill(-cmd.Process.Pid, s)
}

// exitCodeOf is the exit status a shell reports for CMD: its exit code,
// or 128+N and the signal's name when signal N killed it (1 when it was
// not waited for).
func exitCodeOf(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return 1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}

// signalName names sig as kill -l does, with SIG: SIGTERM.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if n := unix.SignalName(s); n != "" {
			return n
		}
	}
	return sig.String()
}
