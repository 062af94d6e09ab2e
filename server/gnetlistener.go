package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/panjf2000/gnet/v2"
)

// The gnet client listener (client_listener gnet). gnet's own acceptor
// (v2.9.4, acceptor_unix.go) answers any accept error but EAGAIN, EINTR,
// ECONNRESET and ECONNABORTED with ErrAcceptSocket, which ends its
// reactor's poll loop and with it the whole engine: an EMFILE during a
// descriptor storm would close every client connection and the port for
// good. So gnet accepts nothing here: the node's accept loop (acceptLoop:
// backoff, /readyz, paxlock_accept_errors_total) accepts on a Go listener
// and enrolls each connection into gnet's event loops (a gnet.Client,
// Client.EnrollContext, which takes a duplicate of the descriptor and
// closes the Go one), which then serve it exactly as if gnet had accepted
// it: OnOpen, OnTraffic, OnClose, and OnTick's sweep.

// startGnet serves the client port addr with gnet's event loops and the
// node's accept loop, until Shutdown (stopGnet).
func (s *Server) startGnet(addr string) error {
	opts := []gnet.Option{
		gnet.WithTicker(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{s.log}),
		gnet.WithReadBufferCap(64 << 10),
	}
	if s.cfg.EventLoops > 0 {
		opts = append(opts, gnet.WithNumEventLoop(s.cfg.EventLoops))
	} else {
		opts = append(opts, gnet.WithMulticore(true))
	}
	loops, err := gnet.NewClient(&handler{s: s}, opts...)
	if err != nil {
		return fmt.Errorf("server: client listener: %w", err)
	}
	// Go's listener sets SO_REUSEADDR: a restarted node rebinds its port
	// while the previous process's connections linger in TIME_WAIT.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: client listener: %w", err)
	}
	if s.cfg.wrapClientListener != nil {
		ln = s.cfg.wrapClientListener(ln)
	}
	if err := loops.Start(); err != nil {
		_ = ln.Close()
		return fmt.Errorf("server: client listener: %w", err)
	}
	s.gnetLoops, s.gnetAccepting = loops, make(chan struct{})
	s.running.Store(true)
	h := s.listeners.add("client")
	stop := context.AfterFunc(s.life, func() { _ = ln.Close() })
	done := s.gnetAccepting
	if !s.goBackground(func() {
		defer close(done)
		defer stop()
		s.acceptLoop(ln, h, func(nc net.Conn) bool {
			s.enroll(loops, h, nc)
			return true
		})
	}) {
		close(done)
		stop()
		_ = ln.Close()
		return errors.New("server: start: shut down")
	}
	return nil
}

// enroll hands an accepted connection to gnet's event loops. A failure
// (the descriptor's duplicate refused: EMFILE again) closes the
// connection and counts as a failed accept.
func (s *Server) enroll(loops *gnet.Client, h *listenerHealth, nc net.Conn) {
	if _, err := loops.EnrollContext(nc, nil); err != nil { // nc is closed either way
		h.fail(err)
		s.log.Warn(h.name+" listener: connection not handed to the event loops; closed", "err", err)
	}
}

// stopGnet stops the gnet listener once its accept loop has returned (the
// node's life has ended, closing the listener), so that no enrollment
// waits on event loops that are gone; gnet closes the connections (OnClose).
func (s *Server) stopGnet(ctx context.Context) error {
	select {
	case <-s.gnetAccepting:
	case <-ctx.Done():
		return fmt.Errorf("server: shutdown: client accept loop still running: %w", ctx.Err())
	}
	if err := s.gnetLoops.Stop(); err != nil {
		return fmt.Errorf("server: shutdown: client listener: %w", err)
	}
	return nil
}

// gnetLogger sends gnet's warnings and errors to the node's log.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(format string, args ...any) {}
func (g gnetLogger) Infof(format string, args ...any)  {}
func (g gnetLogger) Warnf(format string, args ...any) {
	g.l.Warn("gnet: " + fmt.Sprintf(format, args...))
}
func (g gnetLogger) Errorf(format string, args ...any) {
	g.l.Error("gnet: " + fmt.Sprintf(format, args...))
}
func (g gnetLogger) Fatalf(format string, args ...any) {
	g.l.Error("gnet: fatal: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}
