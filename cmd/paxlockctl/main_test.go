package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/freeport"
	"github.com/paxlock/paxlock/internal/testutil"
)

// runCtl runs paxlockctl with args and returns its exit status, standard
// output and standard error.
func runCtl(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestParseInterspersed(t *testing.T) {
	cases := []struct {
		args    []string
		pos     []string
		o, ns   string
		timeout time.Duration
	}{
		{[]string{"status"}, []string{"status"}, "table", "default", time.Minute},
		{[]string{"-o", "json", "status"}, []string{"status"}, "json", "default", time.Minute},
		{[]string{"status", "-o", "json"}, []string{"status"}, "json", "default", time.Minute},
		{[]string{"state", "k", "-o=json", "-namespace", "orders"}, []string{"state", "k"}, "json", "orders", time.Minute},
		{[]string{"lock", "-timeout", "3s", "k", "10s", "-o", "json"}, []string{"lock", "k", "10s"}, "json", "default", 3 * time.Second},
		{[]string{"state", "-o", "json", "--", "-k"}, []string{"state", "-k"}, "json", "default", time.Minute},
	}
	for _, c := range cases {
		var o options
		fs := newFlagSet(&o)
		fs.SetOutput(io.Discard)
		pos, _, err := parseInterspersed(fs, c.args)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !reflect.DeepEqual(pos, c.pos) || o.output != c.o || o.ns != c.ns || o.timeout != c.timeout {
			t.Errorf("%q: positional %q -o %s -namespace %s -timeout %v, want %q %s %s %v", c.args, pos, o.output, o.ns, o.timeout, c.pos, c.o, c.ns, c.timeout)
		}
	}
	var o options
	fs := newFlagSet(&o)
	fs.SetOutput(io.Discard)
	if _, _, err := parseInterspersed(fs, []string{"status", "-nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown flag after the command: %v", err)
	}
	fs = newFlagSet(&o)
	fs.SetOutput(io.Discard)
	if _, _, err := parseInterspersed(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv(SecretEnv, "")
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"status", "extra"},
		{"state"},
		{"lock", "k", "notaduration"},
		{"namespace"},
		{"namespace", "add"},
		{"status", "-o", "yaml"},
		{"status", "-nope"},
	} {
		code, _, _ := runCtl(t, "", args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// statusServer serves /status as node id with the given admin address
// list, and counts what it was sent on /namespaces.
type statusServer struct {
	*httptest.Server
	mu        sync.Mutex
	posted    []string
	st        adminapi.Status
	authHeads []string
}

func newStatusServer(t *testing.T, st adminapi.Status) *statusServer {
	s := &statusServer{st: st}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.authHeads = append(s.authHeads, r.Header.Get("Authorization"))
		switch {
		case r.URL.Path == "/status":
			_ = json.NewEncoder(w).Encode(s.st)
		case r.URL.Path == "/namespaces" && r.Method == http.MethodGet:
			_ = json.NewEncoder(w).Encode([]string{"default", "orders"})
		case r.URL.Path == "/namespaces" && r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			s.posted = append(s.posted, string(b))
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *statusServer) addr() string { return strings.TrimPrefix(s.URL, "http://") }

// adminCluster starts two fake nodes (node 2 with a failed store) and
// names a third admin address that refuses connections.
func adminCluster(t *testing.T) (n1, n2 *statusServer, down string, flags []string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down = ln.Addr().String()
	_ = ln.Close() // nothing listens there any more
	groups := func(serving ...int) []adminapi.GroupStatus {
		var gs []adminapi.GroupStatus
		for g := range 3 {
			gs = append(gs, adminapi.GroupStatus{Group: g, Epoch: uint64(g + 1), Applied: 10, Locks: int64(g), Serving: false})
		}
		for _, g := range serving {
			gs[g].Serving = true
		}
		return gs
	}
	n1 = newStatusServer(t, adminapi.Status{Node: 1, Client: "127.0.0.1:7101", Conns: 4, ViewVersion: 9, Groups: groups(0, 2)})
	n2 = newStatusServer(t, adminapi.Status{Node: 2, Client: "127.0.0.1:7102", StorageFailed: true, StorageError: "disk full", Groups: groups()})
	nodes := []adminapi.NodeAddr{
		{ID: 1, Peer: "127.0.0.1:7201", Client: "127.0.0.1:7101", Admin: n1.addr()},
		{ID: 2, Peer: "127.0.0.1:7202", Client: "127.0.0.1:7102", Admin: n2.addr()},
		{ID: 3, Peer: "127.0.0.1:7203", Client: "127.0.0.1:7103", Admin: down},
	}
	n1.st.Nodes, n2.st.Nodes = nodes, nodes
	return n1, n2, down, []string{"-admin", n1.addr() + "," + n2.addr() + "," + down, "-admin-ca", "", "-admin-token-file", ""}
}

// TestStatusJSON: status -o json (given after the command) prints one
// object with the documented fields, a node per admin address and a group
// per group.
func TestStatusJSON(t *testing.T) {
	n1, n2, down, flags := adminCluster(t)
	code, out, errOut := runCtl(t, "", append([]string{"status", "-o", "json"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var raw map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("status -o json printed %q: %v", out, err)
	}
	for _, f := range []string{"admin", "node", "client", "conns", "view_version", "health", "masters"} {
		if _, ok := raw["nodes"][0][f]; !ok {
			t.Errorf("nodes[0] has no field %q: %v", f, raw["nodes"][0])
		}
	}
	for _, f := range []string{"group", "master", "epoch", "applied", "locks"} {
		if _, ok := raw["groups"][0][f]; !ok {
			t.Errorf("groups[0] has no field %q: %v", f, raw["groups"][0])
		}
	}
	var st statusOutput
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	want := []statusNode{
		{Admin: n1.addr(), Node: 1, Client: "127.0.0.1:7101", Conns: 4, ViewVersion: 9, Health: "up", Masters: 2},
		{Admin: n2.addr(), Node: 2, Client: "127.0.0.1:7102", Health: "storage_failed", Error: "disk full"},
	}
	if len(st.Nodes) != 3 || !reflect.DeepEqual(st.Nodes[:2], want) || st.Nodes[2].Admin != down || st.Nodes[2].Health != "down" || st.Nodes[2].Error == "" {
		t.Errorf("nodes %+v, want %+v and %s down", st.Nodes, want, down)
	}
	wantGroups := []statusGroup{{0, 1, 1, 10, 0}, {1, 0, 2, 10, 0}, {2, 1, 3, 10, 2}}
	if !reflect.DeepEqual(st.Groups, wantGroups) {
		t.Errorf("groups %+v, want %+v", st.Groups, wantGroups)
	}

	code, out, _ = runCtl(t, "", append(flags, "status")...)
	if code != 0 || !strings.Contains(out, "NODE") || !strings.Contains(out, "storage failed: disk full") || !strings.Contains(out, "GROUP") {
		t.Errorf("status table: exit %d\n%s", code, out)
	}
}

func TestMembersJSON(t *testing.T) {
	n1, _, down, flags := adminCluster(t)
	code, out, errOut := runCtl(t, "", append([]string{"members", "-o", "json"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var raw map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("members -o json printed %q: %v", out, err)
	}
	for _, f := range []string{"id", "peer", "client", "admin", "health", "masters"} {
		if _, ok := raw["members"][0][f]; !ok {
			t.Errorf("members[0] has no field %q: %v", f, raw["members"][0])
		}
	}
	var m membersOutput
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Members) != 3 {
		t.Fatalf("members %+v", m.Members)
	}
	got := fmt.Sprint(m.Members[0].Health, m.Members[0].Masters, m.Members[0].Admin, " ",
		m.Members[1].Health, m.Members[1].Error, " ", m.Members[2].Health, m.Members[2].Admin)
	if want := fmt.Sprint("up", 2, n1.addr(), " ", "storage_failed", "disk full", " ", "down", down); got != want {
		t.Errorf("members: %s, want %s", got, want)
	}
	code, out, _ = runCtl(t, "", append(flags, "members")...)
	if code != 0 || !strings.Contains(out, "HEALTH") || !strings.Contains(out, "127.0.0.1:7203") {
		t.Errorf("members table: exit %d\n%s", code, out)
	}
}

// TestNamespaceSecrets: namespace add takes the new secret from
// PAXLOCK_SECRET or -secret-file (a file or standard input), never from
// the command line; the admin token comes from PAXLOCK_ADMIN_TOKEN.
func TestNamespaceSecrets(t *testing.T) {
	n1, _, _, _ := adminCluster(t)
	flags := []string{"-admin", n1.addr(), "-admin-ca", "", "-admin-token-file", ""}
	t.Setenv(SecretEnv, "")
	t.Setenv(adminapi.TokenEnv, "tok3n")

	code, _, errOut := runCtl(t, "", append(flags, "namespace", "add", "orders", "s3cret")...)
	if code != 2 || !strings.Contains(errOut, SecretEnv) {
		t.Errorf("a secret on the command line: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCtl(t, "", append(flags, "namespace", "add", "orders")...); code != 1 || !strings.Contains(errOut, "no secret") {
		t.Errorf("add without a secret: exit %d, %q", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCtl(t, "", append(flags, "namespace", "add", "orders", "-secret-file", file, "-o", "json")...); code != 0 {
		t.Fatalf("add -secret-file: exit %d, %s", code, errOut)
	} else {
		var nc map[string]any
		if err := json.Unmarshal([]byte(out), &nc); err != nil || nc["namespace"] != "orders" || nc["action"] != "add" || nc["done"] != true {
			t.Errorf("add -o json printed %q (%v)", out, err)
		}
	}
	if code, _, errOut := runCtl(t, "from-stdin\n", append(flags, "namespace", "add", "orders", "-secret-file", "-")...); code != 0 {
		t.Fatalf("add -secret-file -: exit %d, %s", code, errOut)
	}
	t.Setenv(SecretEnv, "from-env")
	if code, _, errOut := runCtl(t, "", append(flags, "namespace", "add", "orders", "-secret-file", file)...); code != 0 {
		t.Fatalf("add with %s: exit %d, %s", SecretEnv, code, errOut)
	}
	code, out, _ := runCtl(t, "", append(flags, "-o", "json", "namespace", "list")...)
	var list namespacesOutput
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || !reflect.DeepEqual(list.Namespaces, []string{"default", "orders"}) {
		t.Errorf("namespace list -o json: exit %d, %q, %v", code, out, err)
	}

	n1.mu.Lock()
	defer n1.mu.Unlock()
	want := []string{`{"name":"orders","secret":"from-file"}`, `{"name":"orders","secret":"from-stdin"}`, `{"name":"orders","secret":"from-env"}`}
	if !reflect.DeepEqual(n1.posted, want) {
		t.Errorf("posted %q, want %q", n1.posted, want)
	}
	for _, h := range n1.authHeads {
		if h != "Bearer tok3n" {
			t.Errorf("request with Authorization %q", h)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	code, out, errOut := runCtl(t, "", "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version -o json printed %q: %v", out, err)
	}
	for _, f := range []string{"version", "modified", "go_version"} {
		if _, ok := v[f]; !ok {
			t.Errorf("no field %q in %v", f, v)
		}
	}
	if code, out, _ := runCtl(t, "", "version"); code != 0 || !strings.HasPrefix(out, "paxlockctl ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

func TestCertsJSON(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCtl(t, "", "certs", "-out", dir, "-nodes", "1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var f filesOutput
	if err := json.Unmarshal([]byte(out), &f); err != nil || len(f.Wrote) == 0 {
		t.Fatalf("certs -o json printed %q (%v)", out, err)
	}
	for _, p := range f.Wrote {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("listed %s: %v", p, err)
		}
	}
}

// TestCertsNode: certs node ID issues a node of an existing CA directory
// its certificate, refuses to overwrite it, and replaces it with -renew.
func TestCertsNode(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCtl(t, "", "certs", "-out", dir, "-nodes", "3"); code != 0 {
		t.Fatalf("certs: exit %d: %s", code, errOut)
	}
	code, out, errOut := runCtl(t, "", "certs", "node", "4", "-out", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("certs node 4: exit %d: %s", code, errOut)
	}
	var f filesOutput
	if err := json.Unmarshal([]byte(out), &f); err != nil || len(f.Wrote) != 2 {
		t.Fatalf("certs node 4 -o json printed %q (%v)", out, err)
	}
	if code, _, errOut := runCtl(t, "", "certs", "node", "4", "-out", dir); code == 0 || !strings.Contains(errOut, "not overwriting") {
		t.Fatalf("certs node 4 again: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCtl(t, "", "certs", "node", "4", "-renew", "-out", dir); code != 0 {
		t.Fatalf("certs node 4 -renew: exit %d: %s", code, errOut)
	}
	if code, _, _ := runCtl(t, "", "certs", "node", "x", "-out", dir); code != 2 {
		t.Fatalf("certs node x: exit %d, want 2 (usage)", code)
	}
}

// TestDrainUsage: drain wants one node id, and fails when no node of
// -admin answers as that node.
func TestDrainUsage(t *testing.T) {
	for _, args := range [][]string{{"drain"}, {"drain", "x"}, {"drain", "0"}, {"drain", "1", "2"}} {
		if code, _, _ := runCtl(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
	a := freeAddrs(t, 1)
	code, _, errOut := runCtl(t, "", "drain", "4", "-admin", a[0], "-admin-ca", "", "-admin-token-file", "", "-timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "no node of -admin answers as node 4") {
		t.Fatalf("drain of an unknown node: exit %d: %s", code, errOut)
	}
}

// freeAddrs returns n loopback addresses for the test's nodes
// (internal/freeport).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := freeport.Loopback(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// TestClientCommandsJSON runs lock, state and watch with -o json against
// one in-process node: every line parses and has the documented fields,
// watch streams the lock's acquire and release and ends cleanly when its
// context is cancelled (SIGINT in main); watch -prefix streams those of
// the keys under its prefix, each named, and not those of a key outside
// it, and ends so too.
func TestClientCommandsJSON(t *testing.T) {
	clientAddr, _ := startOpsNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv(SecretEnv, "ops-secret")
	flags := []string{"-registry", clientAddr, "-namespace", "ops", "-o", "json"}

	// watch, in the background until cancelled.
	var watchOut testutil.Buffer
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan int, 1)
	go func() {
		watchDone <- run(watchCtx, append([]string{"watch", "job:1"}, flags...), strings.NewReader(""), &watchOut, io.Discard)
	}()
	var prefixOut testutil.Buffer
	prefixDone := make(chan int, 1)
	go func() {
		prefixDone <- run(watchCtx, append([]string{"watch", "-prefix", "job:"}, flags...), strings.NewReader(""), &prefixOut, io.Discard)
	}()

	// The watch may register after the lock was taken: it reports the
	// current holder at once then (-after 0), so keep locking until it has
	// seen an acquire and a release.
	var lockLines []map[string]any
	testutil.Eventually(t, 30*time.Second, func() bool {
		if code, _, errOut := runCtl(t, "", append([]string{"lock", "task:1", "0s"}, flags...)...); code != 0 {
			t.Fatalf("lock outside the prefix: exit %d, %s", code, errOut)
		}
		code, out, errOut := runCtl(t, "", append([]string{"lock", "job:1", "0s"}, flags...)...)
		if code != 0 {
			t.Fatalf("lock: exit %d, %s", code, errOut)
		}
		lockLines = nil
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("lock printed %q: %v", sc.Text(), err)
			}
			lockLines = append(lockLines, m)
		}
		w, pw := watchOut.String(), prefixOut.String()
		return strings.Contains(w, `"event":"acquired"`) && strings.Contains(w, `"event":"released"`) &&
			strings.Contains(pw, `"key":"job:1","event":"acquired"`) && strings.Contains(pw, `"key":"job:1","event":"released"`)
	}, "watch saw no acquire and release: %q; watch -prefix: %q", watchOut.String(), prefixOut.String())
	if len(lockLines) != 2 || lockLines[0]["event"] != "locked" || lockLines[1]["event"] != "released" ||
		lockLines[0]["key"] != "job:1" || lockLines[0]["token"] == float64(0) || lockLines[0]["token"] != lockLines[1]["token"] {
		t.Errorf("lock printed %v", lockLines)
	}
	stopWatch()
	select {
	case code := <-watchDone:
		if code != 0 {
			t.Errorf("watch ended with exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end when its context was cancelled")
	}
	select {
	case code := <-prefixDone:
		if code != 0 {
			t.Errorf("watch -prefix ended with exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch -prefix did not end when its context was cancelled")
	}
	psc := bufio.NewScanner(strings.NewReader(prefixOut.String()))
	for psc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(psc.Bytes(), &ev); err != nil {
			t.Fatalf("watch -prefix printed %q: %v", psc.Text(), err)
		}
		if k, _ := ev["key"].(string); !strings.HasPrefix(k, "job:") {
			t.Errorf("watch -prefix job: printed %v", ev)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(watchOut.String()))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("watch printed %q: %v", sc.Text(), err)
		}
		for _, f := range []string{"time", "key", "event", "token", "holder", "value"} {
			if _, ok := ev[f]; !ok {
				t.Errorf("watch event without %q: %v", f, ev)
			}
		}
	}

	code, out, errOut := runCtl(t, "", append([]string{"state", "job:1"}, flags...)...)
	if code != 0 {
		t.Fatalf("state: exit %d, %s", code, errOut)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("state printed %q: %v", out, err)
	}
	for _, f := range []string{"key", "held", "holder", "token", "kind", "readers", "ttl_left_ms", "queue_len", "value"} {
		if _, ok := st[f]; !ok {
			t.Errorf("state without %q: %v", f, st)
		}
	}
	if st["held"] != false || st["key"] != "job:1" {
		t.Errorf("state of a released key: %v", st)
	}

	// locks: held keys under a prefix, in order, cut at -limit.
	c, err := client.New(ctx, client.Config{Registry: []string{clientAddr}, Namespace: "ops", Secret: "ops-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	for _, k := range []string{"job:b", "job:a", "other"} {
		if err := c.Mutex(k, client.TTL(time.Minute)).TryLock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var ls locksOutput
	code, out, errOut = runCtl(t, "", append([]string{"locks", "job:"}, flags...)...)
	if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil || len(ls.Locks) != 2 || ls.More ||
		ls.Locks[0].Key != "job:a" || ls.Locks[1].Key != "job:b" || !ls.Locks[0].Held || ls.Locks[0].Token == 0 {
		t.Errorf("locks job: exit %d, %q, %v (%s)", code, out, err, errOut)
	}
	ls = locksOutput{}
	code, out, _ = runCtl(t, "", append([]string{"locks", "-limit", "1"}, flags...)...)
	if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil || len(ls.Locks) != 1 || !ls.More || ls.Locks[0].Key != "job:a" {
		t.Errorf("locks -limit 1: exit %d, %q, %v", code, out, err)
	}

	t.Setenv(SecretEnv, "wrong")
	if code, _, _ := runCtl(t, "", append([]string{"state", "job:1", "-timeout", "5s"}, flags...)...); code != 1 {
		t.Errorf("state with a wrong secret: exit %d, want 1", code)
	}
}
