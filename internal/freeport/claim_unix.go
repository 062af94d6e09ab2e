//go:build unix

package freeport

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// claimed keeps the lock files open for the process's life.
var claimed []*os.File

// claim takes an exclusive lock on a file named after port under the
// temporary directory, so that no other process reserves the port while
// this one lives; false if another process holds it. Where the file
// cannot be made, the port counts as claimed: the in-process reservation
// still holds.
func claim(port int) bool {
	dir := filepath.Join(os.TempDir(), "paxlock-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return false
	}
	claimed = append(claimed, f)
	return true
}
