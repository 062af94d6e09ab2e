//go:build !unix

package host

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
