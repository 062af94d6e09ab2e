package rawio

import "net"

// Listener returns ln with every connection it accepts wrapped (Wrap), for
// servers that take a net.Listener (net/http).
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
