package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/group"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestReauthOtherNamespaceEndsOldSession: a connection authenticated to
// namespace "ns", with a watch and a blocked acquire there, runs SCRAM
// again for namespace "other" with the same client key. Its blocked
// acquire is answered Granted AUTH_FAILED, and when the key is released
// the connection is neither granted it nor sent the key's watch events:
// nothing of "ns" reaches a session that proves "other"'s secret.
func TestReauthOtherNamespaceEndsOldSession(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	const key = "reauth"
	b := tc.masterConn("ns", key, 2)
	held := b.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Weight: 1, TTLMs: 30000})
	if held.Status != wire.StatusSuccess {
		t.Fatalf("holder: %+v", held)
	}
	a := tc.masterConn("ns", key, 1)
	if r := a.call(wire.TypeWatch, &wire.Watch{Key: key, WatchID: 5, Token: held.Token, Flags: wire.FlagContinuous, MaxWaitMs: 60000}); r.Status != wire.StatusSuccess {
		t.Fatalf("watch: %+v", r)
	}
	if r := a.call(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(1), ID: 1}, Weight: 1, TTLMs: 30000, MaxWaitMs: wire.WaitForever, WaitID: 77}); r.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", r)
	}
	// The handshake's replies and the pushes that come with them: the
	// wait may be ended before the handshake's last reply is sent.
	var pushed []wire.Message
	call := func(typ wire.Type, m wire.Message) wire.Message {
		id := a.send(typ, m)
		for {
			f, msg, err := a.read()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if f.ReqID == id {
				return msg
			}
			pushed = append(pushed, msg)
		}
	}
	if r, err := testutil.ScramHello(call, "other", "x", testKey(1)); err != nil || r.Status != wire.StatusSuccess {
		t.Fatalf("second handshake: %+v, %v", r, err)
	}
	if r := b.call(wire.TypeRelease, &wire.Release{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Token: held.Token}); r.Status != wire.StatusSuccess {
		t.Fatalf("release: %+v", r)
	}
	var gotWait bool
	for {
		var m wire.Message
		if len(pushed) > 0 {
			m, pushed = pushed[0], pushed[1:]
		} else {
			_, msg, err := a.readWithin(2 * time.Second)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			m = msg
		}
		switch m := m.(type) {
		case *wire.Granted:
			if m.WaitID != 77 || m.Status != wire.StatusAuthFailed {
				t.Fatalf("after the handshake for another namespace: %+v, want the wait ended AUTH_FAILED", m)
			}
			gotWait = true
		case *wire.WatchEvent:
			t.Fatalf("a watch event of the old namespace after the handshake for another: %+v", m)
		}
	}
	if !gotWait {
		t.Fatal("the blocked acquire of the old namespace was never answered")
	}
	if st := b.call(wire.TypeState, &wire.State{Key: key}); st.Holder.Client == cid(1) {
		t.Fatalf("the old namespace's wait was granted after the handshake for another: %+v", st)
	}
}

// readWithin is read with a deadline of d.
func (r *rawConn) readWithin(d time.Duration) (wire.Frame, wire.Message, error) {
	if err := r.c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return wire.Frame{}, nil, err
	}
	f, buf, err := wire.ReadFrame(r.c, r.buf, wire.DefaultMaxFrame)
	r.buf = buf
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return f, nil, os.ErrDeadlineExceeded
		}
		return f, nil, err
	}
	m, err := wire.Decode(f.Type, f.Body)
	return f, m, err
}

// TestMaxConnsPerNamespace: with max_conns_per_namespace 2, a third
// client session of the namespace is refused OVERLOADED with
// RetryAfterMs at its first handshake message; another namespace is not
// affected, a session re-authenticating to its own namespace takes no
// second place, and once a session closes the refused client gets in.
func TestMaxConnsPerNamespace(t *testing.T) {
	t.Parallel()
	tc := startClusterWith(t, 1, func(c *Config) { c.MaxConnsPerNamespace = 2 })
	addr := tc.cfgs[0].Nodes[0].Client
	first := dialRaw(t, addr)
	for i, rc := range []*rawConn{first, dialRaw(t, addr)} {
		if r := rc.hello("ns", "s3cret", uint64(i+1)); r.Status != wire.StatusSuccess {
			t.Fatalf("session %d: %+v", i+1, r)
		}
	}
	third := dialRaw(t, addr)
	r := third.hello("ns", "s3cret", 3)
	if r.Status != wire.StatusOverloaded || r.RetryAfterMs == 0 {
		t.Fatalf("third session of the namespace: %+v, want OVERLOADED with RetryAfterMs", r)
	}
	if r := dialRaw(t, addr).hello("other", "x", 4); r.Status != wire.StatusSuccess {
		t.Fatalf("a session of another namespace: %+v", r)
	}
	if r := first.hello("ns", "s3cret", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("re-authentication to the same namespace: %+v", r)
	}
	first.c.Close()
	waitFor(t, "the refused client to get in after a session closed", func() bool {
		return third.hello("ns", "s3cret", 3).Status == wire.StatusSuccess
	})
}

// TestListPagedUnderFrameLimit: a thousand locks of one group, each with
// a value of wire.MaxValueLen bytes, make a List answer of over 1 MiB,
// the client's frame limit. The master answers pages that fit (More set)
// and the client's pages, followed with Next, list every lock once.
func TestListPagedUnderFrameLimit(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	const n = wire.MaxListLimit
	value := strings.Repeat("v", wire.MaxValueLen)
	g := wire.GroupOf(wire.KeyHash("ns", "big/0"), 15)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("big/%06d", i); wire.GroupOf(wire.KeyHash("ns", k), 15) == g {
			keys = append(keys, k)
		}
	}
	rc := tc.masterConn("ns", keys[0], 1)
	for i, k := range keys {
		rc.send(wire.TypeAcquire, &wire.Acquire{Key: k, Owner: wire.Owner{Client: cid(1), ID: uint64(i + 1)}, Weight: 1, TTLMs: 120000, Value: value})
	}
	for range keys {
		_, m, err := rc.read()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := m.(*wire.Response); !ok || r.Status != wire.StatusSuccess {
			t.Fatalf("acquire: %+v", m)
		}
	}
	c := newClient(t, tc)
	ctx := ctxT(t)
	seen := map[string]bool{}
	pages := 0
	for after := ""; ; pages++ {
		page, err := c.List(ctx, "big/", after, n)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, l := range page.Locks {
			if seen[l.Key] || l.Value != value {
				t.Fatalf("page %d: %s listed twice or with the wrong value", pages, l.Key)
			}
			seen[l.Key] = true
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if len(seen) != n || pages < 2 {
		t.Fatalf("%d locks listed in %d pages, want %d in more than one", len(seen), pages+1, n)
	}
}

// TestOversizedReplyAnsweredError: a reply whose frame would pass the
// frame limit a client reads is not sent; its request is answered ERROR
// saying so, rather than not at all.
func TestOversizedReplyAnsweredError(t *testing.T) {
	c := &conn{s: &Server{log: testLogger(), cfg: Config{MaxOutput: 16 << 20}}}
	c.s.cfg.PreAuthMaxOutput = 16 << 20   // the bare connection is not authenticated
	c.fc = &gnetConn{c: c, writing: true} // a write under way: the frame stays in c.out
	big := wire.Response{Status: wire.StatusSuccess, Msg: strings.Repeat("m", wire.DefaultMaxFrame)}
	c.mu.Lock()
	c.appendLocked(wire.TypeResponse, 7, &big)
	f, n, err := wire.ParseFrame(c.out, wire.DefaultMaxFrame)
	if err != nil || n == 0 || n != len(c.out) || f.ReqID != 7 {
		t.Fatalf("the answer: %+v, %d of %d bytes, %v", f, n, len(c.out), err)
	}
	m, err := wire.Decode(f.Type, f.Body)
	if r, ok := m.(*wire.Response); err != nil || !ok || r.Status != wire.StatusError {
		t.Fatalf("the answer: %+v, %v; want ERROR", m, err)
	}
}

// TestSessionLimitsConfig: the session limits are read from their JSON
// keys beside the other settings, and default when unset.
func TestSessionLimitsConfig(t *testing.T) {
	var c Config
	if err := DecodeStrict([]byte(`{"max_conns_per_namespace": 5, "max_waited": "30s", "max_holders_per_key": 64}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.MaxConnsPerNamespace != 5 || time.Duration(c.MaxWaited) != 30*time.Second || c.MaxHoldersPerKey != 64 {
		t.Fatalf("decoded %+v", c.SessionLimits)
	}
	var d SessionLimits
	d.ensureDefaults()
	if d.MaxConnsPerNamespace != DefaultMaxConnsPerNamespace || time.Duration(d.MaxWaited) != group.DefaultMaxWaited || d.MaxHoldersPerKey != group.DefaultMaxHoldersPerKey {
		t.Fatalf("defaults %+v", d)
	}
}
