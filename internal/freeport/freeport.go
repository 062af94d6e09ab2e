// Package freeport hands out loopback addresses for nodes started inside
// one process (tests, package paxlocktest): each was free a moment ago,
// none is handed out twice in the process, and all lie below the
// kernel's ephemeral range (from 32768), so that no outgoing connection
// can take the port a restarted node needs again. Test binaries that run
// at once (go test runs packages in parallel) never share a port: each
// reservation also holds a lock on a file named after the port, which
// the kernel releases when the process ends (claim_unix.go).
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// ErrExhausted means no free port was found in the range.
var ErrExhausted = errors.New("freeport: no free loopback ports in 20000-29999")

var handed struct {
	sync.Mutex
	m map[int]bool
}

// take reserves port for the caller, false if it was handed out before
// in this process or is held by another process (claim).
func take(port int) bool {
	handed.Lock()
	defer handed.Unlock()
	if handed.m[port] || !claim(port) {
		return false
	}
	if handed.m == nil {
		handed.m = map[int]bool{}
	}
	handed.m[port] = true
	return true
}

// Loopback returns n distinct 127.0.0.1 addresses, each free when
// returned and never returned before in this process.
func Loopback(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n+1000 {
			return nil, ErrExhausted
		}
		port := 20000 + rand.IntN(10000)
		if !take(port) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}
