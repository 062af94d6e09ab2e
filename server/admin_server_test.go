package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// rawAdminGet sends one keep-alive GET of path on c and reads the
// answer's status line and headers (not the body).
func rawAdminGet(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp
}

// TestAdminServerBounds: the admin endpoint closes a keep-alive
// connection idle for admin_idle_timeout and one that sends half a
// request for admin_read_timeout, serves at most admin_max_conns
// connections at once (a further one waits until one closes), and keeps
// a server-sent event stream open past admin_write_timeout as long as it
// moves.
func TestAdminServerBounds(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) {
		c.AdminIdleTimeout = Duration(300 * time.Millisecond)
		c.AdminReadTimeout = Duration(300 * time.Millisecond)
		c.AdminWriteTimeout = Duration(time.Second)
		c.AdminMaxConns = 2
	})
	addr := tc.cfgs[0].AdminAddr
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	closedWithin := func(c net.Conn, what string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("%s: not closed within 30 s: %v", what, err)
		}
	}

	idle := dial()
	br := bufio.NewReader(idle)
	resp := rawAdminGet(t, idle, br, "/healthz")
	_, _ = io.Copy(io.Discard, resp.Body)
	closedWithin(idle, "an idle keep-alive")

	half := dial()
	if _, err := io.WriteString(half, "GET /healthz HTTP/1.1\r\nHost: 12"); err != nil {
		t.Fatal(err)
	}
	closedWithin(half, "half a request")

	// Two connections in use; a third is accepted only once one closes.
	a, b := dial(), dial()
	for _, c := range []net.Conn{a, b} {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127"); err != nil {
			t.Fatal(err)
		}
	}
	third := dial()
	tbr := bufio.NewReader(third)
	if _, err := io.WriteString(third, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	closedWithin(a, "the first of two held connections")
	closedWithin(b, "the second of two held connections")
	_ = third.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := http.ReadResponse(tbr, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a third connection once the others closed: %v %v", resp, err)
	}
	_ = third.Close()

	// The event stream outlives the write timeout (1 s) as it moves.
	ev := dial()
	ebr := bufio.NewReader(ev)
	resp = rawAdminGet(t, ev, ebr, "/events")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/events: %s", resp.Status)
	}
	start := time.Now()
	_ = ev.SetReadDeadline(start.Add(40 * time.Second))
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// A line written after the write timeout passed since the
		// stream began: the deadline moved with the writes.
		if line := sc.Text(); line != "" && time.Since(start) > 1500*time.Millisecond {
			return
		}
	}
	t.Fatalf("/events ended after %v without a line past the write timeout: %v", time.Since(start), sc.Err())
}
