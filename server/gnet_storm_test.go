package server

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// stormChildEnv makes the test binary run TestGnetDescriptorStorm's
// storm itself: it lowers its own RLIMIT_NOFILE, which the rest of the
// test binary must not share.
const stormChildEnv = "PAXLOCK_TEST_DESCRIPTOR_STORM_CHILD"

// TestGnetDescriptorStorm: a node whose client port runs gnet outlives
// a descriptor storm. With the process's NOFILE lowered to its open
// count + 64, connections are opened until none more can be: while the
// node's accepts fail, /readyz (Ready) says the client listener is not
// accepting, the failures are counted, and a connection opened before
// the storm is still served; once the storm's connections close, a new
// connection is served within acceptBackoffMax (plus a loaded machine's
// slack), and the listener is reported accepting again. The storm runs in
// a child process (this test binary, re-run).
func TestGnetDescriptorStorm(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RLIMIT_NOFILE and /proc/self/fd: Linux")
	}
	if os.Getenv(stormChildEnv) == "1" {
		gnetStorm(t)
		return
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestGnetDescriptorStorm$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), stormChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestGnetDescriptorStorm")) {
		t.Fatalf("storm child: %v\n%s", err, tailBytes(out, 8000))
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "storm:") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// gnetStorm is TestGnetDescriptorStorm's child.
func gnetStorm(t *testing.T) {
	tc := startClusterWith(t, 1, func(c *Config) {
		c.ClientListener = ListenerGnet
		// The storm's connections stay open until the test closes them.
		c.AuthTimeout = Duration(time.Hour)
		c.IdleTimeout = Duration(time.Hour)
	})
	s := tc.nodes[0]
	addr := s.cfg.self().Client
	view := func(rc *rawConn) bool {
		_, ok := rc.callAny(wire.TypeGetView, &wire.GetView{}).(*wire.View)
		return ok
	}
	before := dialRaw(t, addr)
	if !view(before) {
		t.Fatal("no view before the storm")
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(openFDs(t) + 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Registered after the cluster's: runs before its shutdown.
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	var storm []net.Conn
	for len(storm) < 1000 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Logf("storm: %d connections opened, then: %v", len(storm), err)
			break
		}
		storm = append(storm, c)
	}
	var why string
	testutil.Eventually(t, 30*time.Second, func() bool {
		_, why = s.Ready()
		return strings.Contains(why, `client listener "client" not accepting`)
	}, "Ready to report the failing accepts")
	t.Logf("storm: /readyz: %s", why)
	if n := s.listeners.all()[0].errors.Load(); n == 0 {
		t.Fatal("no failed accept counted")
	}
	if !view(before) {
		t.Fatal("a connection opened before the storm is not served during it")
	}
	for _, c := range storm {
		_ = c.Close()
	}
	back := time.Now()
	testutil.Eventually(t, 30*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		rc := &rawConn{t: t, c: c}
		if _, err := c.Write(mustFrame(t, wire.TypeGetView, 1, &wire.GetView{})); err != nil {
			return false
		}
		f, _, err := rc.read()
		return err == nil && f.Type == wire.TypeView
	}, "a connection served after the storm")
	took := time.Since(back)
	t.Logf("storm: served again %v after the storm's connections closed; %d failed accepts counted",
		took, s.listeners.all()[0].errors.Load())
	if took > acceptBackoffMax+4*time.Second {
		t.Fatalf("served again only %v after descriptors came back (retry at most every %v)", took, acceptBackoffMax)
	}
	// Only the listener's part of Ready: the storm may have cost the
	// node more (a storage file it could not open stops its group).
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		why := s.listeners.notAccepting()
		return why == "", why
	}, "the client listener reported accepting again")
	_, why = s.Ready()
	t.Logf("storm: after it, Ready says %q", why)
}

func mustFrame(t *testing.T, typ wire.Type, id uint64, m wire.Message) []byte {
	b, err := wire.AppendFrame(nil, typ, id, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
