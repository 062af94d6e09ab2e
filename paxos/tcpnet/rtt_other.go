//go:build !linux

package tcpnet

import (
	"net"
	"time"
)

// connRTT is not known on this platform.
func connRTT(net.Conn) time.Duration { return 0 }
