package rawio

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection, the first
// wrapped.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	w := Wrap(c)
	t.Cleanup(func() { _ = w.Close(); _ = s.Close() })
	return w, s
}

func TestWrapOnlyTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("Wrap changed a connection that is not TCP")
	}
	w, _ := pair(t)
	if _, ok := w.(*net.TCPConn); ok {
		t.Fatal("Wrap returned the TCP connection unwrapped")
	}
}

func TestRoundTripAndEOF(t *testing.T) {
	w, s := pair(t)
	if _, err := w.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(w, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("wrapped read %q, %v", buf, err)
	}
	if n, err := w.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}
	_ = s.Close()
	if n, err := w.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}
}

// TestLargeWriteWaitsForRoom writes far more than the socket buffers
// hold, so the write meets EAGAIN and waits on the netpoller, and checks
// that every byte arrives in order.
func TestLargeWriteWaitsForRoom(t *testing.T) {
	w, s := pair(t)
	data := make([]byte, 16<<20)
	_, _ = rand.Read(data)
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096) // a slow reader: small reads
		for b.Len() < len(data) {
			n, err := s.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.Bytes()
	}()
	n, err := w.Write(data)
	if err != nil || n != len(data) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if !bytes.Equal(<-got, data) {
		t.Fatal("the peer received other bytes than were written")
	}
}

func TestReadDeadline(t *testing.T) {
	w, _ := pair(t)
	_ = w.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := w.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v; want a timeout", err)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	w, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := w.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let the read park; it returns either way
	_ = w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v; want net.ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the blocked read")
	}
}

func TestWriteToResetPeer(t *testing.T) {
	w, s := pair(t)
	_ = s.(*net.TCPConn).SetLinger(0)
	_ = s.Close() // RST
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = w.Write(make([]byte, 64<<10))
	}
	var oe *net.OpError
	if err == nil || !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("writes to a reset peer: %v; want a write *net.OpError", err)
	}
}

func TestNoAllocations(t *testing.T) {
	w, s := pair(t)
	msg := []byte("0123456789")
	buf := make([]byte, len(msg))
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(w, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per round trip; want none on the wrapped side (the peer's package net allocates none either)", allocs)
	}
}

func TestListenerWraps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listener(ln)
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			_, _ = c.Write([]byte("x"))
			_ = c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); ok {
		t.Fatal("Listener's Accept returned the connection unwrapped")
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b, err)
	}
}

// TestConcurrentWritesWhole: Writes from several goroutines at once each
// arrive whole, never interleaved, as with package net.
func TestConcurrentWritesWhole(t *testing.T) {
	w, s := pair(t)
	const writers, writes, size = 8, 100, 4096
	go func() {
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := bytes.Repeat([]byte{byte('a' + i)}, size)
				for range writes {
					if _, err := w.Write(msg); err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
	}()
	buf := make([]byte, size)
	for n := 0; n < writers*writes; n++ {
		_ = s.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatalf("after %d messages: %v", n, err)
		}
		if !bytes.Equal(buf, bytes.Repeat(buf[:1], size)) {
			t.Fatalf("message %d mixes two writers' bytes", n)
		}
	}
}
