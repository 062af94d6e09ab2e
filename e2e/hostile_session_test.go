package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// hostileReauthKey is the raw connection's client key (16..64 bytes).
const hostileReauthKey = "hostile-reauth-client-key-0001"

// TestHostileReauthentication proves that a second SCRAM handshake on one
// connection carries nothing of the first namespace: a raw connection to
// the master of key "reauth" authenticates to namespace e2e (A), sets a
// continuous watch on the key and a blocked acquire on it (a client of A
// holds it), authenticates again to namespace b (B) with the same client
// key; then A's holder releases and A is deleted. The connection must get
// no Granted for A's wait and no WatchEvent for A's key from then on.
func TestHostileReauthentication(t *testing.T) {
	c := hostileSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, body, err := adminDo(http.MethodPost, c.procs[0].admin, "/namespaces", "application/json", []byte(`{"name":"b","secret":"sb"}`), nil); err != nil || code/100 != 2 {
		t.Fatalf("add namespace b: %d %s %v", code, body, err)
	}
	holder := c.newClient(ctx)
	defer holder.Close()
	const key = "reauth"
	m := holder.Mutex(key, client.TTL(30*time.Second))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	target := c.masterOf(key)
	c.waitUntil("namespace b known to the key's master", 30*time.Second, func() bool {
		probe := dialRaw(t, target.addr)
		defer probe.nc.Close()
		st, err := probe.scram("b", "sb", hostileReauthKey)
		return err == nil && st == wire.StatusSuccess
	})
	rc := dialRaw(t, target.addr)
	if st, err := rc.scram("e2e", "s", hostileReauthKey); err != nil || st != wire.StatusSuccess {
		t.Fatalf("SCRAM for namespace e2e: %v %v", st, err)
	}
	me := wire.ClientIDOf(hostileReauthKey)
	wid := rc.send(wire.TypeWatch, &wire.Watch{Key: key, WatchID: 1, Flags: wire.FlagContinuous, MaxWaitMs: 60_000})
	if f, err := rc.reply(wid, 10*time.Second); err != nil || f.Type != wire.TypeResponse {
		t.Fatalf("watch: %v %v", f.Type, err)
	}
	aid := rc.send(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: me, ID: 1}, Kind: wire.KindExclusive, Weight: 1, TTLMs: 10_000, MaxWaitMs: 60_000, WaitID: 7})
	f, err := rc.reply(aid, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resp wire.Response
	if err := rc.enc.DecodeInto(f.Body, &resp); err != nil || resp.Status != wire.StatusLockWait {
		t.Fatalf("blocked acquire: %v %q %v", resp.Status, resp.Msg, err)
	}
	if st, err := rc.scram("b", "sb", hostileReauthKey); err != nil || st != wire.StatusSuccess {
		t.Fatalf("SCRAM for namespace b: %v %v", st, err)
	}
	// From here on nothing of namespace e2e may reach the connection.
	pushes := make(chan wire.Frame, 64)
	go func() {
		defer close(pushes)
		for {
			f, err := rc.read(30 * time.Second)
			if err != nil {
				return
			}
			if f.IsPush() {
				pushes <- f
			}
		}
	}()
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("holder's release: %v", err)
	}
	if code, body, err := adminDo(http.MethodDelete, c.procs[0].admin, "/namespaces?name=e2e", "", nil, nil); err != nil || code/100 != 2 {
		t.Logf("delete namespace e2e: %d %s %v", code, strings.TrimSpace(body), err)
	}
	deadline := time.After(4 * time.Second)
	for {
		select {
		case f, ok := <-pushes:
			if !ok {
				return // the node closed the connection: nothing leaked
			}
			switch f.Type {
			case wire.TypeGranted:
				var g wire.Granted
				_ = rc.enc.DecodeInto(f.Body, &g)
				t.Errorf("namespace e2e's wait was granted to the connection re-authenticated for namespace b: %+v", g)
			case wire.TypeWatchEvent:
				var e wire.WatchEvent
				_ = rc.enc.DecodeInto(f.Body, &e)
				t.Errorf("namespace e2e's watch event reached the connection re-authenticated for namespace b: %+v", e)
			default:
				t.Logf("push %s after re-authentication", f.Type)
			}
		case <-deadline:
			return
		}
	}
}

// TestHostileAdminCSRF proves that a browser page cannot drive the admin
// endpoint of a cluster run without an admin token (CLUSTER_SECURE=0): a
// force-unlock POSTed as application/x-www-form-urlencoded, a namespace
// added as text/plain, GET /backup with Host: evil.example (DNS
// rebinding), and a namespace POSTed as JSON with Origin:
// https://evil.example and Sec-Fetch-Site: cross-site are each refused
// (4xx), and none took effect: the lock is still held with its token and
// value, the namespaces do not exist.
func TestHostileAdminCSRF(t *testing.T) {
	c := hostileSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.newClient(ctx)
	defer cl.Close()
	const key = "csrf"
	m := cl.Mutex(key, client.TTL(30*time.Second), client.Value("holder-value"))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	master := c.masterOf(key)
	nsBody := func(name string) []byte {
		b, _ := json.Marshal(map[string]string{"name": name, "secret": "x"})
		return b
	}
	unlock, _ := json.Marshal(map[string]string{"namespace": "e2e", "key": key})
	cases := []struct {
		what, method, addr, path, ctype string
		body                            []byte
		hdr                             map[string]string
	}{
		{"force-unlock as a form POST", http.MethodPost, master.admin, "/locks/unlock", "application/x-www-form-urlencoded", unlock, nil},
		{"force-unlock as text/plain", http.MethodPost, master.admin, "/locks/unlock", "text/plain", unlock, nil},
		{"namespace add as text/plain", http.MethodPost, c.procs[0].admin, "/namespaces", "text/plain", nsBody("evil1"), nil},
		{"namespace add as a form POST", http.MethodPost, c.procs[0].admin, "/namespaces", "application/x-www-form-urlencoded", nsBody("evil2"), nil},
		{"GET /backup under Host evil.example", http.MethodGet, c.procs[0].admin, "/backup", "", nil, map[string]string{"Host": "evil.example"}},
		{"namespace add from a cross-site Origin", http.MethodPost, c.procs[0].admin, "/namespaces", "application/json", nsBody("evil3"),
			map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}},
	}
	for _, tc := range cases {
		code, body, err := adminDo(tc.method, tc.addr, tc.path, tc.ctype, tc.body, tc.hdr)
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		t.Logf("%s: %d %.80q", tc.what, code, strings.TrimSpace(body))
		if code < 400 || code >= 500 {
			t.Errorf("%s: answered %d, want a 4xx refusal", tc.what, code)
		}
	}
	if !m.Held() {
		t.Error("the holder no longer believes it holds the key")
	}
	st, err := cl.State(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Token != m.Token() || st.Value != "holder-value" {
		t.Errorf("the lock's state changed: %+v, want held with token %d and its value", st, m.Token())
	}
	for _, ns := range []string{"evil1", "evil2", "evil3"} {
		rc := dialRaw(t, c.procs[0].addr)
		if status, err := rc.scram(ns, "x", hostileReauthKey); err == nil && status == wire.StatusSuccess {
			t.Errorf("namespace %s was added by a cross-site request", ns)
		}
	}
}
