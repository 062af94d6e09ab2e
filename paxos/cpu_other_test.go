//go:build !unix

package paxos

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
