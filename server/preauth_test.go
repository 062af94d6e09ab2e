package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// paddedFrame is a GetView frame padded to total bytes: its header
// declares that length, so the frame bound sees it whole.
func paddedFrame(t *testing.T, id uint64, total int) []byte {
	b, err := wire.AppendFrame(nil, wire.TypeGetView, id, &wire.GetView{})
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, make([]byte, total-len(b))...)
	binary.BigEndian.PutUint32(b, uint32(total-4))
	return b
}

// waitClosed reads from c until the node closes it, within a generous
// deadline; it fails the test if the connection stays open.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	buf := make([]byte, 64<<10)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("connection still open")
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || err != nil {
			return
		}
	}
}

// TestPreAuthFrameLimit: before authentication a frame over
// preauth_max_frame closes the connection and counts as a bad frame; an
// authenticated client may send frames up to max_frame.
func TestPreAuthFrameLimit(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) { c.PreAuthMaxFrame = 8 << 10 })
	s := tc.nodes[0]
	addr := s.cfg.self().Client
	before := s.stats.badFrames.Load()
	rc := dialRaw(t, addr)
	if _, err := rc.c.Write(paddedFrame(t, 1, 16<<10)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, rc.c)
	if n := s.stats.badFrames.Load() - before; n != 1 {
		t.Fatalf("bad frames counted: %d, want 1", n)
	}

	// Authenticated, the same frame is within max_frame: the connection
	// stays and answers.
	ac := dialRaw(t, addr)
	if r := ac.hello("ns", "s3cret", 0x71); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	before = s.stats.badFrames.Load()
	if _, err := ac.c.Write(paddedFrame(t, 99, 16<<10)); err != nil {
		t.Fatal(err)
	}
	if _, ok := ac.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View); !ok {
		t.Fatal("no view after a large frame from an authenticated client")
	}
	if n := s.stats.badFrames.Load() - before; n != 0 {
		t.Fatalf("authenticated large frame counted as bad: %d", n)
	}
}

// TestAuthTimeout: a connection that heartbeats but never authenticates
// is closed at auth_timeout and counted; an authenticated one on the
// same node stays.
func TestAuthTimeout(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) { c.AuthTimeout = Duration(2 * time.Second) })
	s := tc.nodes[0]
	addr := s.cfg.self().Client
	ac := dialRaw(t, addr)
	if r := ac.hello("ns", "s3cret", 0x72); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	rc := dialRaw(t, addr)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // heartbeats, never reads
		defer close(done)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for id := uint64(1); ; id++ {
			b, _ := wire.AppendFrame(nil, wire.TypeHeartbeat, id, &wire.Heartbeat{})
			if _, err := rc.c.Write(b); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	waitClosed(t, rc.c)
	close(stop)
	<-done
	testutil.Eventually(t, 30*time.Second, func() bool { return s.stats.authTimeouts.Load() >= 1 }, "auth timeout counted")
	if _, ok := ac.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View); !ok {
		t.Fatal("authenticated connection lost at auth_timeout")
	}
}

// smallRcvDial dials addr with a 4 KiB socket receive buffer, so that the
// kernel takes little of what the node sends before the node must hold it.
func smallRcvDial(t *testing.T, addr string) net.Conn {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPreAuthOutputLimit: pipelined GetViews never read by an
// unauthenticated connection close it as a slow consumer once their
// unread replies pass preauth_max_output, far below max_output (20,000
// views of a one-node cluster are a few hundred KiB).
func TestPreAuthOutputLimit(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) { c.PreAuthMaxOutput = 64 << 10 })
	s := tc.nodes[0]
	before := s.stats.slowConsumers.Load()
	c := smallRcvDial(t, s.cfg.self().Client)
	var batch []byte
	for id := uint64(1); id <= 200; id++ {
		b, err := wire.AppendFrame(nil, wire.TypeGetView, id, &wire.GetView{})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, b...)
	}
	// 20,000 replies: past preauth_max_output, well under max_output.
	sent := 0
	for ; sent < 20000; sent += 200 {
		_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(batch); err != nil {
			break // closed by the node
		}
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return s.stats.slowConsumers.Load() > before },
		"slow consumer counted after %d GetViews", sent)
	waitClosed(t, c)
}

// TestHalfSentFramesMemory: 200 connections that each send only a frame
// header declaring ~1 MiB grow the node's heap (in this process) by at
// most 64 KiB each: nothing is allocated from a declared length. The
// pre-auth frame bound is raised to max_frame so that the connections stay
// open, reading their frames.
func TestHalfSentFramesMemory(t *testing.T) {
	tc := startClusterWith(t, 1, func(c *Config) { c.PreAuthMaxFrame = 1 << 20 })
	addr := tc.nodes[0].cfg.self().Client
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	const n = 200
	before := heap()
	hdr := make([]byte, wire.HeaderSize)
	binary.BigEndian.PutUint32(hdr, 1<<20-4)
	hdr[4] = wire.Version
	hdr[5] = byte(wire.TypeGetView)
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second) // let the node read what was sent (a bound check, not a wait on a condition)
	after := heap()
	if after > before && (after-before)/n > 64<<10 {
		t.Fatalf("heap grew %d bytes per half-sent frame, want at most 64 KiB", (after-before)/n)
	}
	before2 := tc.nodes[0].stats.badFrames.Load()
	if before2 != 0 {
		t.Fatalf("%d half-sent frames refused as bad: the test measures nothing", before2)
	}
	t.Logf("heap in use %d → %d over %d half-sent 1 MiB frames", before, after, len(conns))
}

// TestPreAuthBoundsGnet: the gnet listener applies the same pre-auth
// frame and output bounds as the goroutine listeners.
func TestPreAuthBoundsGnet(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) {
		c.ClientListener = ListenerGnet
		c.PreAuthMaxFrame = 8 << 10
		c.PreAuthMaxOutput = 64 << 10
	})
	s := tc.nodes[0]
	addr := s.cfg.self().Client
	bad := s.stats.badFrames.Load()
	rc := dialRaw(t, addr)
	if _, err := rc.c.Write(paddedFrame(t, 1, 16<<10)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, rc.c)
	if n := s.stats.badFrames.Load() - bad; n != 1 {
		t.Fatalf("bad frames counted: %d, want 1", n)
	}
	slow := s.stats.slowConsumers.Load()
	c := smallRcvDial(t, addr)
	var batch []byte
	for id := uint64(1); id <= 200; id++ {
		b, err := wire.AppendFrame(nil, wire.TypeGetView, id, &wire.GetView{})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, b...)
	}
	for sent := 0; sent < 20000; sent += 200 {
		_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(batch); err != nil {
			break
		}
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return s.stats.slowConsumers.Load() > slow },
		"slow consumer counted on the gnet listener")
}
