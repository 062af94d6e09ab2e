package server

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
)

// failingListener fails its first n accepts with EMFILE.
type failingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestAcceptLoopSurvivesEMFILE: an accept loop whose accepts fail with
// EMFILE keeps accepting once they succeed again; while failing the
// listener is reported not accepting, and a successful accept clears it.
func TestAcceptLoopSurvivesEMFILE(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingListener{Listener: inner}
	ln.n.Store(5)
	s := &Server{log: testLogger()}
	s.life, s.endLife = context.WithCancel(context.Background())
	defer s.endLife()
	h := s.listeners.add("client")
	served := make(chan net.Conn, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.acceptLoop(ln, h, func(nc net.Conn) bool {
			if why := s.listeners.notAccepting(); why != "" {
				t.Errorf("still not accepting after a successful accept: %s", why)
			}
			served <- nc
			return true
		})
	}()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nc := <-served
	nc.Close()
	if h.errors.Load() != 5 {
		t.Fatalf("accept errors counted: %d, want 5", h.errors.Load())
	}
	h.fail(errors.New("accept: too many open files"))
	if why := s.listeners.notAccepting(); why == "" {
		t.Fatal("a failed accept left the listener reported accepting")
	}
	_ = inner.Close()
	<-done
}
