package session

import (
	"bufio"
	"errors"
	"net"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// signal is a Handler that wakes the benchmark on each frame.
type signal chan struct{}

func (s signal) Frame(wire.Frame, []byte) { s <- struct{}{} }
func (s signal) Heartbeat(*wire.Response) {}
func (s signal) Closed(error)             {}

// BenchmarkRoundTrip measures one request through a session and its echo
// back through the reader, over loopback TCP: the session's own cost per
// request, which must stay free of allocations.
func BenchmarkRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		var buf []byte
		for {
			var err error
			if _, buf, err = wire.ReadFrame(br, buf, 0); err != nil {
				return
			}
			if _, err := nc.Write(buf); err != nil {
				return
			}
		}
	}()
	c, _, err := Dial(b.Context(), ln.Addr().String(), Config{})
	if err != nil {
		b.Fatal(err)
	}
	got := make(signal, 1)
	done := make(chan error, 1)
	go func() { done <- c.Run(got) }()
	m := &wire.State{Key: "bench-key"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := c.Append(wire.TypeState, uint64(i+1), m); err != nil {
			b.Fatal(err)
		}
		<-got
	}
	b.StopTimer()
	c.Close(nil)
	if err := <-done; !errors.Is(err, ErrClosed) {
		b.Fatalf("Run ended with %v, want ErrClosed", err)
	}
}
