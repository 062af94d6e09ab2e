package tcpnet

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// connRTT returns the kernel's smoothed round-trip time of c's TCP
// connection (TCP_INFO), or 0 if it cannot be read. The kernel measures it
// on the traffic the connection carries anyway, so it costs no probe.
func connRTT(c net.Conn) time.Duration {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tcp, ok := c.(syscall.Conn) // a *net.TCPConn, or rawio's wrapper of one
	if !ok {
		return 0
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return 0
	}
	var rtt time.Duration
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			rtt = time.Duration(info.Rtt) * time.Microsecond
		}
	})
	return rtt
}
