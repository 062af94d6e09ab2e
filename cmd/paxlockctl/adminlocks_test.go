package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/server"
)

// startOpsCluster starts three nodes on loopback serving namespace "ops"
// (secret "ops-secret") with admin token token, ready when it returns,
// and returns their client and admin addresses.
func startOpsCluster(t *testing.T, token string) (clients, admins []string) {
	t.Helper()
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	a := freeAddrs(t, 12)
	var nodes []server.NodeAddr
	for i := range 3 {
		nodes = append(nodes, server.NodeAddr{ID: uint32(i + 1), Peer: a[4*i], Client: a[4*i+1], Gossip: a[4*i+2], Admin: a[4*i+3]})
		clients, admins = append(clients, a[4*i+1]), append(admins, a[4*i+3])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var srvs []*server.Server
	for i := range 3 {
		srv, err := server.New(server.Config{
			NodeID: uint32(i + 1), Nodes: nodes, AdminAddr: admins[i], DataDir: t.TempDir(), AdminTokenFile: tokFile,
			Namespaces: []server.Namespace{{Name: "ops", Secret: "ops-secret"}}, Groups: 6, EventLoops: 1,
			Lease: server.Duration(500 * time.Millisecond), Heartbeat: server.Duration(50 * time.Millisecond),
		}, testutil.Logger())
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		srvs = append(srvs, srv)
	}
	for _, srv := range srvs {
		if err := srv.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return clients, admins
}

// TestAdminLockReads: with the admin token and no namespace secret,
// locks and state read any namespace's locks through the admin
// endpoints (GET /locks, GET /locks/{ns}/{key}), from any node: the
// holders with their values, the waiter queue with weights, pages
// through -limit; without the token the endpoints answer 401.
func TestAdminLockReads(t *testing.T) {
	clients, admins := startOpsCluster(t, "s3cret-token")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: clients, Namespace: "ops", Secret: "ops-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	keys := []string{"job/a", "job/b", "job/c", "job/d", "other"}
	for _, k := range keys {
		if err := c.Mutex(k, client.TTL(time.Minute), client.Value("v-"+k)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c2, err := client.New(ctx, client.Config{Registry: clients, Namespace: "ops", Secret: "ops-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	waiting := make(chan error, 1)
	go func() { waiting <- c2.Mutex("job/a", client.Weight(7)).Lock(ctx) }()

	t.Setenv(SecretEnv, "")
	t.Setenv(adminapi.TokenEnv, "s3cret-token")
	flags := []string{"-admin", strings.Join(admins, ","), "-admin-ca", "", "-namespace", "ops", "-o", "json"}
	var d adminapi.LockDetail
	for deadline := time.Now().Add(30 * time.Second); len(d.Waiters) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never showed in state: %+v", d)
		}
		code, out, errOut := runCtl(t, "", append(flags, "state", "job/a")...)
		if code != 0 {
			t.Fatalf("state via admin: exit %d, %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("state -o json printed %q: %v", out, err)
		}
	}
	if !d.Held || d.Kind != "exclusive" && d.Kind != "write" || len(d.Holders) != 1 || d.Holders[0].Value != "v-job/a" || d.Holders[0].TTLLeftMs <= 0 ||
		d.Master == 0 || d.Waiters[0].Weight != 7 || d.Waiters[0].Kind == "" || d.Namespace != "ops" || d.Key != "job/a" {
		t.Errorf("state job/a via admin: %+v", d)
	}
	// Every node answers it: the master itself, the others by redirect.
	for _, a := range admins {
		code, out, errOut := runCtl(t, "", "-admin", a, "-admin-ca", "", "-namespace", "ops", "-o", "json", "state", "job/a")
		var di adminapi.LockDetail
		if err := json.Unmarshal([]byte(out), &di); code != 0 || err != nil || di.Master != d.Master || len(di.Holders) != 1 {
			t.Errorf("state via %s: exit %d, %q (%v), %s", a, code, out, err, errOut)
		}
	}
	code, out, errOut := runCtl(t, "", append(slices.Clone(flags[:len(flags)-2]), "state", "job/a")...)
	if code != 0 || !strings.Contains(out, `"v-job/a"`) || !strings.Contains(out, "WEIGHT") {
		t.Errorf("state table via admin: exit %d, %q, %s", code, out, errOut)
	}

	// locks, from any node, in key order, paged by -limit.
	for _, a := range admins {
		code, out, errOut := runCtl(t, "", "-admin", a, "-admin-ca", "", "-namespace", "ops", "-o", "json", "locks", "job/")
		var lo locksOutput
		if err := json.Unmarshal([]byte(out), &lo); code != 0 || err != nil || len(lo.Locks) != 4 || lo.More {
			t.Fatalf("locks via %s: exit %d, %q (%v), %s", a, code, out, err, errOut)
		}
		for i, l := range lo.Locks {
			if l.Key != keys[i] || l.Value != "v-"+keys[i] || !l.Held || l.Token == 0 {
				t.Errorf("locks via %s: lock %d is %+v, want %s", a, i, l, keys[i])
			}
		}
		if lo.Locks[0].QueueLen != 1 {
			t.Errorf("locks via %s: job/a has %d waiting, want 1", a, lo.Locks[0].QueueLen)
		}
	}
	code, out, _ = runCtl(t, "", append(flags, "-limit", "3", "locks")...)
	var lo locksOutput
	if err := json.Unmarshal([]byte(out), &lo); code != 0 || err != nil || len(lo.Locks) != 3 || !lo.More || lo.Locks[2].Key != "job/c" {
		t.Errorf("locks -limit 3: exit %d, %q, %v", code, out, err)
	}
	// A page of one lock at a time walks every lock once, in order.
	var walked []string
	for after := ""; ; {
		var page adminapi.LockPage
		getAdmin(t, admins[0], "s3cret-token", "/locks?namespace=ops&limit=1&after="+after, http.StatusOK, &page)
		for _, l := range page.Locks {
			walked = append(walked, l.Key)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if strings.Join(walked, " ") != strings.Join(keys, " ") {
		t.Errorf("paged by one: %q, want %q", walked, keys)
	}

	getAdmin(t, admins[1], "", "/locks?namespace=ops", http.StatusUnauthorized, nil)
	getAdmin(t, admins[1], "", "/locks/ops/job/a", http.StatusUnauthorized, nil)
	getAdmin(t, admins[1], "s3cret-token", "/locks?namespace=nope", http.StatusNotFound, nil)
	getAdmin(t, admins[1], "s3cret-token", "/locks?namespace=ops&limit=0", http.StatusBadRequest, nil)
	if code, _, _ := runCtl(t, "", "-admin", admins[0], "-admin-ca", "", "-namespace", "nope", "state", "k"); code != 1 {
		t.Errorf("state in an unknown namespace via admin: exit %d, want 1", code)
	}
	// A run form's -weight is its place in the queue the admin read shows.
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("ops-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run, _, runErr := background(ctx, nil, "-registry", strings.Join(clients, ","), "-namespace", "ops", "-secret-file", secretFile,
		"lock", "job/a", "-weight", "9", "--", "true")
	for deadline := time.Now().Add(30 * time.Second); len(d.Waiters) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("paxlockctl lock -weight 9 never showed in the queue: %+v; %s", d, runErr.String())
		}
		code, out, errOut := runCtl(t, "", append(flags, "state", "job/a")...)
		if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil {
			t.Fatalf("state via admin: exit %d, %q, %s", code, out, errOut)
		}
	}
	if w := []int{d.Waiters[0].Weight, d.Waiters[1].Weight}; !slices.Contains(w, 9) || !slices.Contains(w, 7) {
		t.Errorf("the queue's weights: %v, want 7 and 9", w)
	}
	// With the namespace secret, state asks the client protocol.
	t.Setenv(SecretEnv, "ops-secret")
	code, out, errOut = runCtl(t, "", "-registry", strings.Join(clients, ","), "-namespace", "ops", "-o", "json", "state", "job/b")
	if code != 0 || !strings.Contains(out, `"queue_len"`) || strings.Contains(out, `"holders"`) {
		t.Errorf("state with the secret: exit %d, %q, %s", code, out, errOut)
	}
	_ = c.Close()
	if err := <-waiting; err != nil {
		t.Errorf("the waiter, once job/a's holder left: %v", err)
	}
	_ = c2.Close()
	if code := exitOf(t, run); code != 0 {
		t.Errorf("lock -weight 9 -- true: exit %d, %s", code, runErr.String())
	}
}

// getAdmin GETs path from an admin endpoint with token ("" none), wants
// status code, and decodes a 200 answer into v.
func getAdmin(t *testing.T, addr, token, path string, code int, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %s, want %d", path, resp.Status, code)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
}
