//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// leftoverRuns lists the running processes whose environment carries this
// binary's runMarkerEnv, other than the binary itself. Without /proc (not
// Linux) it finds nothing.
func leftoverRuns() []leftover {
	self := os.Getpid()
	mark := []byte(runMarkerEnv + "=" + strconv.Itoa(self) + "\x00")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []leftover
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, mark...)) {
			continue // another user's, gone meanwhile, a zombie (no environment), or not ours
		}
		pgid, err := syscall.Getpgid(pid)
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		out = append(out, leftover{pid: pid, pgid: pgid, cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))})
	}
	return out
}

// killRuns kills (SIGKILL) the processes leftoverRuns finds, each one's
// process group with it unless that is the test binary's own group, and
// returns them.
func killRuns() []leftover {
	own := syscall.Getpgrp()
	left := leftoverRuns()
	for _, l := range left {
		if l.pgid > 1 && l.pgid != own {
			_ = syscall.Kill(-l.pgid, syscall.SIGKILL) // a group already gone has nothing to kill
		}
		_ = syscall.Kill(l.pid, syscall.SIGKILL)
	}
	return left
}
