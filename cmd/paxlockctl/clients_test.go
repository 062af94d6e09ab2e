package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxlocktest"
	"github.com/paxlock/paxlock/server"
)

// TestClientsCLI: clients lists every node's sessions through any node,
// with the namespace, a waiter's blocked acquire and a watch counted on
// their sessions,
// -in filtering by namespace and -limit bounding the list; GET /clients
// with limit=1 pages through the same sessions, across nodes, as one
// page of them all; a limit above the largest page is refused (400).
func TestClientsCLI(t *testing.T) {
	clients, admins := startOpsCluster(t, "s3cret-token")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := client.Config{Registry: clients, Namespace: "ops", Secret: "ops-secret"}
	holder, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Close() }()
	waiter, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = waiter.Close() }()
	if err := holder.Mutex("cl/a", client.TTL(time.Minute)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { _ = waiter.Mutex("cl/a").Lock(ctx) }()
	w, err := holder.Watch(ctx, "cl/w", 0, client.Continuous())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()

	t.Setenv(SecretEnv, "")
	t.Setenv(adminapi.TokenEnv, "s3cret-token")
	list := func(admin string, args ...string) clientsOutput {
		t.Helper()
		code, out, errOut := runCtl(t, "", append([]string{"-admin", admin, "-admin-ca", "", "-o", "json", "clients"}, args...)...)
		var co clientsOutput
		if err := json.Unmarshal([]byte(out), &co); code != 0 || err != nil {
			t.Fatalf("clients %v via %s: exit %d, %q (%v) %s", args, admin, code, out, err, errOut)
		}
		return co
	}
	wid, hid := strconv.FormatUint(waiter.ID(), 16), strconv.FormatUint(holder.ID(), 16)
	testutil.Eventually(t, 30*time.Second, func() bool {
		waits, watches := false, false
		for _, s := range list(admins[0]).Clients {
			waits = waits || s.Client == wid && s.Waits > 0
			watches = watches || s.Client == hid && s.Watches > 0
		}
		return waits && watches
	}, "the waiter's session with its blocked acquire, the holder's with its watch")
	for _, a := range admins {
		co := list(a)
		seen := map[string]bool{}
		for _, s := range co.Clients {
			if s.Namespace != "ops" || s.Node == 0 || s.Remote == "" || s.Connected.IsZero() {
				t.Errorf("via %s: session %+v", a, s)
			}
			seen[s.Client] = true
		}
		if !seen[wid] || !seen[hid] || len(co.Missing) != 0 {
			t.Errorf("via %s: sessions %+v, missing %v: want both clients, every node answering", a, co.Clients, co.Missing)
		}
	}
	if co := list(admins[1], "-limit", "1"); len(co.Clients) != 1 {
		t.Errorf("clients -limit 1: %d sessions", len(co.Clients))
	}
	if co := list(admins[1], "-in", "nosuch"); len(co.Clients) != 0 {
		t.Errorf("clients -in nosuch: %+v", co.Clients)
	}

	// GET /clients, one session a page, gives what one page of all does.
	get := func(q string) (int, adminapi.ClientPage) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admins[2]+"/clients?"+q, nil)
		req.Header.Set("Authorization", "Bearer s3cret-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var p adminapi.ClientPage
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p
	}
	code, all := get("limit=1000")
	if code != http.StatusOK || len(all.Clients) < 2 || all.Next != "" {
		t.Fatalf("GET /clients: HTTP %d, %+v", code, all)
	}
	var paged []string
	for after := ""; len(paged) <= len(all.Clients); {
		code, p := get("limit=1&after=" + after)
		if code != http.StatusOK || len(p.Clients) > 1 {
			t.Fatalf("GET /clients?limit=1: HTTP %d, %+v", code, p)
		}
		for _, s := range p.Clients {
			paged = append(paged, adminapi.CursorOf(s).String())
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	var want []string
	for _, s := range all.Clients {
		want = append(want, adminapi.CursorOf(s).String())
	}
	if strings.Join(paged, " ") != strings.Join(want, " ") {
		t.Errorf("paged one at a time: %q, want %q", paged, want)
	}
	if code, _ := get("limit=" + strconv.Itoa(adminapi.MaxClientsLimit+1)); code != http.StatusBadRequest {
		t.Errorf("limit above %d: HTTP %d, want 400", adminapi.MaxClientsLimit, code)
	}
}

// TestClientsNodeDown: a node that does not answer is named in clients'
// missing, and the others' sessions are still listed.
func TestClientsNodeDown(t *testing.T) {
	var admins []string
	cl := paxlocktest.NewCluster(t, 3, paxlocktest.Options{Tune: func(c *server.Config) { admins = append(admins, c.AdminAddr) }})
	c := cl.Client(t)
	if err := cl.StopNode(3); err != nil {
		t.Fatal(err)
	}
	t.Setenv(SecretEnv, "")
	t.Setenv(adminapi.TokenEnv, "")
	id := strconv.FormatUint(c.ID(), 16)
	testutil.Eventually(t, 30*time.Second, func() bool {
		code, out, _ := runCtl(t, "", "-admin", admins[0], "-admin-ca", "", "-admin-token-file", "", "-o", "json", "clients")
		var co clientsOutput
		if code != 0 || json.Unmarshal([]byte(out), &co) != nil || len(co.Missing) != 1 || co.Missing[0] != 3 {
			return false
		}
		for _, s := range co.Clients {
			if s.Client == id && s.Node != 3 {
				return true
			}
		}
		return false
	}, "clients to name node 3 missing and list the client's session on another node")
}
