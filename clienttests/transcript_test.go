package clienttests_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxlocktest"
)

// updateTranscript rewrites client/wire/testdata/session.txt's frames
// from a session recorded now:
//
//	go test ./clienttests -run TestSessionTranscript -update-transcript
//	(cd client && go test ./wire -run TestTranscript -update)
//
// (the second fills in each frame's decoded fields).
var updateTranscript = flag.Bool("update-transcript", false, "record client/wire/testdata/session.txt's frames from a real session")

const transcriptFile = "../client/wire/testdata/session.txt"

// tap records the frames crossing a connection, both ways, in the order
// they cross.
type tap struct {
	mu     sync.Mutex
	frames []tapped
}

type tapped struct {
	dir string // "c->s" or "s->c"
	raw []byte
}

// tapConn passes a connection's bytes through and cuts them into frames.
type tapConn struct {
	net.Conn
	t      *tap
	rd, wr []byte // partial frames
}

func (t *tap) add(dir string, buf *[]byte, b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	*buf = append(*buf, b...)
	for {
		f, n, err := wire.ParseFrame(*buf, 0)
		if err != nil || n == 0 {
			return
		}
		_ = f
		t.frames = append(t.frames, tapped{dir, append([]byte(nil), (*buf)[:n]...)})
		*buf = (*buf)[n:]
	}
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.t.add("s->c", &c.rd, b[:n])
	return n, err
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.t.add("c->s", &c.wr, b)
	return c.Conn.Write(b)
}

// recordSession runs the transcript's session against a one-node cluster
// and returns its frames: authentication and the view, a try-lock
// answered LOCK_OCCUPIED (another client holds the key with a value), a
// blocking Lock queued and woken by a Granted push when the other client
// releases, a Renew, a SetValue, a watch of another key with its event,
// and the Unlock. Heartbeats and the client's periodic view refreshes
// (GetView and its View) are left out: their timing is the clock's.
func recordSession(t *testing.T) []tapped {
	cluster := paxlocktest.NewCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	other := cluster.Client(t)
	b := other.Mutex("order:42", client.TTL(30*time.Second), client.Value("worker-7"))
	if err := b.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	tp := &tap{}
	cfg := cluster.ClientConfig()
	cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &tapConn{Conn: c, t: tp}, nil
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := c.Mutex("order:42", client.TTL(30*time.Second))
	if err := m.TryLock(ctx); err == nil {
		t.Fatal("TryLock of a held key succeeded")
	}
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	waitFor(t, tp, "LOCK_WAIT", func(f wire.Frame, msg wire.Message) bool {
		r, ok := msg.(*wire.Response)
		return ok && r.Status == wire.StatusLockWait
	})
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if err := m.Renew(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.SetValue(ctx, "step 2"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, "config:flags", 0, client.MaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := other.Mutex("config:flags")
	if err := f.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Events():
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	w.Close()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []tapped
	refresh := map[uint64]bool{} // request ids of view refreshes
	for _, fr := range tp.frames {
		f, _, _ := wire.ParseFrame(fr.raw, 0)
		switch {
		case f.Type == wire.TypeHeartbeat:
			continue
		case f.Type == wire.TypeGetView:
			refresh[f.ReqID] = true
			continue
		case f.Type == wire.TypeView && refresh[f.ReqID]:
			continue
		}
		out = append(out, fr)
	}
	return out
}

// waitFor waits until a frame the tap saw satisfies ok.
func waitFor(t *testing.T, tp *tap, what string, ok func(wire.Frame, wire.Message) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		tp.mu.Lock()
		for _, fr := range tp.frames {
			f, _, err := wire.ParseFrame(fr.raw, 0)
			if err != nil {
				continue
			}
			if msg, err := wire.Decode(f.Type, f.Body); err == nil && ok(f, msg) {
				tp.mu.Unlock()
				return
			}
		}
		tp.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s frame within 30 s", what)
}

// TestSessionTranscript records the transcript's session with today's
// client and node and checks it is the session client/wire/testdata/session.txt
// shows: the same frames, by direction and type, in the same order. The
// file's bytes differ from run to run (nonces, client key, tokens); the
// exchange does not.
func TestSessionTranscript(t *testing.T) {
	got := recordSession(t)
	if *updateTranscript {
		var b strings.Builder
		b.WriteString(transcriptHeader)
		for i, fr := range got {
			f, _, _ := wire.ParseFrame(fr.raw, 0)
			fmt.Fprintf(&b, "frame %02d-%s\ndir %s\nhex %s\n\n", i+1, strings.ToLower(f.Type.String()), fr.dir, hex.EncodeToString(fr.raw))
		}
		if err := os.WriteFile(transcriptFile, []byte(strings.TrimSuffix(b.String(), "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d frames to %s; now run (cd client && go test ./wire -run TestTranscript -update)", len(got), transcriptFile)
		return
	}
	want := transcriptSteps(t)
	var have []string
	for _, fr := range got {
		f, _, _ := wire.ParseFrame(fr.raw, 0)
		have = append(have, fr.dir+" "+f.Type.String())
	}
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the session's frames differ from %s (after a deliberate change: -update-transcript):\ngot:\n%s\nwant:\n%s",
			transcriptFile, strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
}

// transcriptSteps reads the file's frames as "dir Type" lines.
func transcriptSteps(t *testing.T) []string {
	fh, err := os.Open(transcriptFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []string
	var dir string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "dir":
			dir = v
		case "hex":
			raw, err := hex.DecodeString(strings.ReplaceAll(v, " ", ""))
			if err != nil {
				t.Fatal(err)
			}
			f, _, err := wire.ParseFrame(raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, dir+" "+f.Type.String())
		}
	}
	return out
}

const transcriptHeader = `# One whole client session of the paxlock client protocol
# (docs/protocol.md), as the Go client and a node exchanged it: recorded by
# clienttests/transcript_test.go against a one-node cluster, heartbeats and
# periodic view refreshes (GetView) left out. The namespace is "test", its secret "paxlocktest-secret": with the
# nonces and salt below, a client author can check a SCRAM-SHA-256
# implementation against the proofs here.
#
#  1. authentication (ScramClientFirst .. ScramServerFinal) and the view
#  2. a try-lock of "order:42", held by another client with the value
#     "worker-7": LOCK_OCCUPIED names the holder
#  3. a blocking Acquire of it: LOCK_WAIT, then a Granted push when the
#     other client releases
#  4. a Renew, then a Renew that sets the value "step 2"
#  5. a Watch of "config:flags" and its event when another client takes it
#  6. the Release
#
# Records: "frame NN-type", "dir c->s" (client to server) or "s->c", and
# after go test ./wire -run TestTranscript -update (in client/) the decoded type,
# request id, field names and body (as in vectors.txt); "hex" is the whole
# frame. go test ./wire -run TestTranscript (in client/) checks that every frame decodes
# to the fields shown and encodes back to the same bytes, and that every
# response answers an earlier request.

`
