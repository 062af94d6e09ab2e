package session

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/paxlock/paxlock/client/internal/testutil"
	"github.com/paxlock/paxlock/client/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peer is the far end of a session in a test: it reads and writes frames.
type peer struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func newPeer(t *testing.T, nc net.Conn) *peer {
	t.Cleanup(func() { nc.Close() })
	return &peer{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// read reads one frame and decodes its body.
func (p *peer) read() (wire.Frame, wire.Message) {
	p.t.Helper()
	_ = p.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	f, _, err := wire.ReadFrame(p.br, nil, 0)
	if err != nil {
		p.t.Errorf("peer: read: %v", err)
		return wire.Frame{}, nil
	}
	m, err := wire.Decode(f.Type, f.Body)
	if err != nil {
		p.t.Errorf("peer: decode %s: %v", f.Type, err)
	}
	return f, m
}

// write sends one frame.
func (p *peer) write(typ wire.Type, reqID uint64, m wire.Message) {
	p.t.Helper()
	b, err := wire.AppendFrame(nil, typ, reqID, m)
	if err != nil {
		p.t.Fatalf("peer: encode: %v", err)
	}
	p.writeRaw(b)
}

func (p *peer) writeRaw(b []byte) {
	p.t.Helper()
	_ = p.nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
	if _, err := p.nc.Write(b); err != nil {
		p.t.Errorf("peer: write: %v", err)
	}
}

// listen starts a loopback listener whose first connection serve handles.
func listen(t *testing.T, serve func(p *peer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		serve(newPeer(t, nc))
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// recorder is a Handler that records what it is given.
type recorder struct {
	mu         sync.Mutex
	frames     []wire.Frame
	heartbeats []uint64
	closed     []error
}

func (r *recorder) Frame(f wire.Frame, raw []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.Body = append([]byte(nil), f.Body...)
	r.frames = append(r.frames, f)
}

func (r *recorder) Heartbeat(resp *wire.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heartbeats = append(r.heartbeats, resp.ViewVersion)
}

func (r *recorder) Closed(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = append(r.closed, cause)
}

func (r *recorder) counts() (frames, heartbeats, closed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.frames), len(r.heartbeats), len(r.closed)
}

// run serves c in the background; the returned func waits for Run's
// result.
func run(t *testing.T, c *Conn, h Handler) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Run(h) }()
	t.Cleanup(func() { c.Close(nil) })
	return func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return")
			return nil
		}
	}
}

var testHello = *keyed(&wire.Hello{Namespace: "ns", Agent: "test", Via: 2}, key5)

func TestDialHelloSuccess(t *testing.T) {
	got := make(chan wire.Message, 1)
	addr := listen(t, func(p *peer) {
		f, _ := p.read()
		if f.Type != wire.TypeHello || f.ReqID != 1 {
			t.Errorf("first frame %s id %d, want Hello id 1", f.Type, f.ReqID)
		}
		// A push before the reply is skipped by the handshake.
		p.write(wire.TypeViewChanged, 0, &wire.View{Version: 3})
		p.write(wire.TypeResponse, f.ReqID, &wire.Response{Status: wire.StatusSuccess, ViewVersion: 7})
		// Sent right behind the reply: the session's reader must see it.
		p.write(wire.TypeGranted, 0, &wire.Granted{WaitID: 5, Key: "k"})
		f, m := p.read()
		if f.Type != wire.TypeState || f.ReqID != 9 {
			t.Errorf("request %s id %d, want State id 9", f.Type, f.ReqID)
		}
		got <- m
		p.write(wire.TypeResponse, 9, &wire.Response{Status: wire.StatusSuccess})
		_, _ = p.br.ReadByte() // until the session closes
	})
	c, r, err := Dial(context.Background(), addr, Config{Handshake: RelayHello(testHello)})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if r.Status != wire.StatusSuccess || r.ViewVersion != 7 {
		t.Fatalf("hello reply %+v", r)
	}
	var rec recorder
	wait := run(t, c, &rec)
	if err := c.Append(wire.TypeState, 9, &wire.State{Key: "k"}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if m := (<-got).(*wire.State); m.Key != "k" {
		t.Fatalf("peer got %+v", m)
	}
	testutil.Eventually(t, 20*time.Second, func() bool { n, _, _ := rec.counts(); return n == 2 }, "two frames handed over")
	rec.mu.Lock()
	if rec.frames[0].Type != wire.TypeGranted || rec.frames[1].Type != wire.TypeResponse || rec.frames[1].ReqID != 9 {
		t.Errorf("frames %+v, want Granted then the Response to 9", rec.frames)
	}
	rec.mu.Unlock()
	c.Close(nil)
	if err := wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run: %v, want ErrClosed", err)
	}
	if _, _, n := rec.counts(); n != 1 {
		t.Fatalf("Closed called %d times, want 1", n)
	}
}

func TestDialHelloRefused(t *testing.T) {
	addr := listen(t, func(p *peer) {
		f, _ := p.read()
		p.write(wire.TypeResponse, f.ReqID, &wire.Response{Status: wire.StatusAuthFailed, Msg: "wrong secret"})
		_, _ = p.br.ReadByte()
	})
	c, r, err := Dial(context.Background(), addr, Config{Handshake: RelayHello(testHello)})
	var re *RefusedError
	if !errors.As(err, &re) || c != nil {
		t.Fatalf("Dial: %v, %v; want a RefusedError", c, err)
	}
	if re.Reply.Status != wire.StatusAuthFailed || r.Status != wire.StatusAuthFailed || r.Msg != "wrong secret" {
		t.Fatalf("refusal %+v, reply %+v", re.Reply, r)
	}
}

func TestDialHelloUnexpectedReply(t *testing.T) {
	addr := listen(t, func(p *peer) {
		f, _ := p.read()
		p.write(wire.TypeView, f.ReqID, &wire.View{Version: 1})
		_, _ = p.br.ReadByte()
	})
	if _, _, err := Dial(context.Background(), addr, Config{Handshake: RelayHello(testHello)}); !errors.Is(err, ErrUnexpectedReply) {
		t.Fatalf("Dial: %v, want ErrUnexpectedReply", err)
	}
}

func TestDialHelloTimeout(t *testing.T) {
	addr := listen(t, func(p *peer) {
		p.read()
		_, _ = p.br.ReadByte() // never answers
	})
	_, _, err := Dial(context.Background(), addr, Config{Handshake: RelayHello(testHello), HandshakeTimeout: 50 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial: %v, want a timeout", err)
	}
}

func TestDialHelloCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr := listen(t, func(p *peer) {
		p.read()
		cancel()
		_, _ = p.br.ReadByte()
	})
	if _, _, err := Dial(ctx, addr, Config{Handshake: RelayHello(testHello)}); err == nil {
		t.Fatal("Dial succeeded after its context ended")
	}
}

func TestDialRefusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, _, err := Dial(context.Background(), addr, Config{DialTimeout: time.Second}); err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
}

// pipe returns a session over net.Pipe and the peer at its far end.
func pipe(t *testing.T, cfg Config) (*Conn, *peer) {
	a, b := net.Pipe()
	return newConn(a, cfg), newPeer(t, b)
}

func TestHeartbeatAnswered(t *testing.T) {
	c, p := pipe(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: 10 * time.Second})
	var rec recorder
	wait := run(t, c, &rec)
	for i := range 3 {
		f, _ := p.read()
		if f.Type != wire.TypeHeartbeat || f.ReqID != HeartbeatID {
			t.Fatalf("frame %s id %d, want a Heartbeat with HeartbeatID", f.Type, f.ReqID)
		}
		p.write(wire.TypeResponse, f.ReqID, &wire.Response{Status: wire.StatusSuccess, ViewVersion: uint64(i + 1)})
	}
	testutil.Eventually(t, 20*time.Second, func() bool { _, n, _ := rec.counts(); return n == 3 }, "three heartbeat replies")
	rec.mu.Lock()
	if len(rec.frames) != 0 || rec.heartbeats[2] != 3 {
		t.Errorf("frames %v heartbeats %v: heartbeat replies must go to Heartbeat only", rec.frames, rec.heartbeats)
	}
	rec.mu.Unlock()
	c.Close(nil)
	p.nc.Close()
	if err := wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run: %v", err)
	}
}

func TestHeartbeatTimeoutCloses(t *testing.T) {
	c, p := pipe(t, Config{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: 30 * time.Millisecond})
	var rec recorder
	wait := run(t, c, &rec)
	go func() { _, _ = io.Copy(io.Discard, p.nc) }() // reads, never answers
	if err := wait(); !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("Run: %v, want ErrHeartbeatTimeout", err)
	}
	if _, _, n := rec.counts(); n != 1 || !errors.Is(rec.closed[0], ErrHeartbeatTimeout) {
		t.Fatalf("Closed: %v", rec.closed)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
}

func TestHeartbeatWithoutTimeout(t *testing.T) {
	// Without a HeartbeatTimeout an unanswered Heartbeat is forgotten and
	// another one follows; the session stays up.
	c, p := pipe(t, Config{HeartbeatInterval: 10 * time.Millisecond})
	var rec recorder
	wait := run(t, c, &rec)
	for range 3 {
		if f, _ := p.read(); f.Type != wire.TypeHeartbeat {
			t.Fatalf("frame %s, want Heartbeat", f.Type)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
	c.Close(nil)
	if err := wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run: %v", err)
	}
}

func TestReadLoopErrors(t *testing.T) {
	big := make([]byte, wire.HeaderSize)
	big[1] = 0x10 // a length of 1 MiB
	big[4] = wire.Version
	badVersion := []byte{0, 0, 0, 10, 9, byte(wire.TypeResponse), 0, 0, 0, 0, 0, 0, 0, 1}
	for name, tc := range map[string]struct {
		send []byte
		want error
	}{
		"bad version": {badVersion, wire.ErrBadVersion},
		"too large":   {big, wire.ErrFrameTooLarge},
		"cut short":   {badVersion[:6], io.ErrUnexpectedEOF},
		"closed":      {nil, io.EOF},
	} {
		t.Run(name, func(t *testing.T) {
			c, p := pipe(t, Config{MaxFrame: 4096})
			var rec recorder
			wait := run(t, c, &rec)
			if tc.send != nil {
				p.writeRaw(tc.send)
			}
			p.nc.Close()
			err := wait()
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v, want %v", err, tc.want)
			}
			if _, _, n := rec.counts(); n != 1 {
				t.Fatalf("Closed called %d times", n)
			}
			if err := c.Append(wire.TypeHeartbeat, 1, &wire.Heartbeat{}); !errors.Is(err, ErrClosed) {
				t.Fatalf("Append after the end: %v, want ErrClosed", err)
			}
		})
	}
}

func TestWriteErrorCloses(t *testing.T) {
	c, p := pipe(t, Config{})
	var rec recorder
	wait := run(t, c, &rec)
	p.nc.Close()
	_ = c.Append(wire.TypeHeartbeat, 1, &wire.Heartbeat{})
	if err := wait(); err == nil {
		t.Fatal("Run returned nil")
	}
	if _, _, n := rec.counts(); n != 1 {
		t.Fatalf("Closed called %d times", n)
	}
}

func TestQueueBound(t *testing.T) {
	c, p := pipe(t, Config{MaxQueued: 64})
	defer p.nc.Close()
	defer c.Close(nil)
	// Not running: nothing drains the queue.
	if err := c.AppendRaw(make([]byte, 60)); err != nil {
		t.Fatalf("AppendRaw within the bound: %v", err)
	}
	if err := c.AppendRaw(make([]byte, 10)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("AppendRaw over the bound: %v, want ErrQueueFull", err)
	}
	if err := c.Append(wire.TypeState, 1, &wire.State{Key: "k"}); err != nil {
		t.Fatalf("Append while at most MaxQueued bytes wait: %v", err)
	}
	if err := c.Append(wire.TypeState, 2, &wire.State{Key: "k"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Append over the bound: %v, want ErrQueueFull", err)
	}
}

func TestCloseBeforeRun(t *testing.T) {
	c, p := pipe(t, Config{})
	defer p.nc.Close()
	cause := errors.New("gone")
	c.Close(cause)
	c.Close(errors.New("second"))
	var rec recorder
	if err := c.Run(&rec); err != cause {
		t.Fatalf("Run: %v, want the first cause", err)
	}
	if _, _, n := rec.counts(); n != 0 {
		t.Fatal("Closed called for a session that never ran")
	}
	if c.Err() != cause {
		t.Fatalf("Err: %v", c.Err())
	}
}

func TestBatchedWrite(t *testing.T) {
	// Frames queued before Run go out first and in order.
	c, p := pipe(t, Config{})
	for i := uint64(1); i <= 3; i++ {
		if err := c.Append(wire.TypeState, i, &wire.State{Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	var rec recorder
	wait := run(t, c, &rec)
	for i := uint64(1); i <= 3; i++ {
		if f, _ := p.read(); f.ReqID != i {
			t.Fatalf("frame %d has id %d", i, f.ReqID)
		}
	}
	c.Close(nil)
	if err := wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run: %v", err)
	}
}
