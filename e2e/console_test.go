//go:build console

package e2e

// This file builds only with -tags console (make console-test): it links
// chromedp, which make test would compile only to skip the test.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
)

// findChromium returns the browser TestConsoleBrowser drives:
// $PAXLOCK_CHROMIUM, else the first of chromium, chromium-browser and
// google-chrome on $PATH; "" if none.
func findChromium() string {
	if p := os.Getenv("PAXLOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestConsoleBrowser drives the web console in headless Chromium (through
// the DevTools protocol, chromedp) against three paxlockd processes set up
// as make run does them: peer mTLS, admin HTTPS with the development CA
// and a bearer token. The page asks for the token; once given it shows 15
// groups with a master and three ready nodes; a lock taken with the Go
// client and a second client waiting for it appear among the hottest keys
// with the holder, and leave when the lock is released; the connected
// clients show the waiter's blocked acquire, and an election followed by
// its key shows its leader's value and term. A screenshot goes
// to $PAXLOCK_ARTIFACTS (make console-test: .artifacts/) or the test's
// temporary directory. Each step waits for a condition in the page, never
// for a fixed time. Run with make console-test (PAXLOCK_CONSOLE=1).
func TestConsoleBrowser(t *testing.T) {
	if os.Getenv("PAXLOCK_CONSOLE") == "" {
		t.Skip("set PAXLOCK_CONSOLE=1 (make console-test) to drive the web console in headless Chromium")
	}
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on $PATH (apt-get install -y chromium, or set PAXLOCK_CHROMIUM): the web console test needs a browser")
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := pki.WriteDev(certs, pki.DevOptions{Cluster: "paxlock", Nodes: 3, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, buildPaxlockd(t, dir), dir)
	var nodes []nodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), Gossip: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= 3; i++ {
		c.add(i, nodes, nodes[i-1].Admin, "", map[string]any{
			"tls":              map[string]string{"ca": filepath.Join(certs, pki.DevCACert), "cert": filepath.Join(certs, pki.DevNodeCert(i)), "key": filepath.Join(certs, pki.DevNodeKey(i))},
			"admin_tls":        map[string]string{},
			"admin_token_file": filepath.Join(certs, pki.DevAdminToken),
			"gossip_key_file":  filepath.Join(certs, pki.DevGossipKey),
		})
	}
	tok, err := os.ReadFile(filepath.Join(certs, pki.DevAdminToken))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	pool, err := pki.LoadCAPool(filepath.Join(certs, pki.DevCACert))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	for _, n := range nodes {
		c.waitUntil(fmt.Sprintf("node %d ready", n.ID), 90*time.Second, func() bool {
			resp, err := hc.Get("https://" + n.Admin + "/readyz")
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close() // drained
			return resp.StatusCode == http.StatusOK
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox,        // CI runs as root
		chromedp.DisableGPU,       // no display
		chromedp.IgnoreCertErrors, // the development CA is not the browser's
		chromedp.WindowSize(1280, 1600),
	)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	// poll waits until expr (JavaScript) is true in the page, failing
	// with what the page shows when it does not become so.
	poll := func(what, expr string) {
		t.Helper()
		ok, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
		if err != nil || !ok {
			text, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s: %v; the page shows:\n%s", what, err, text)
		}
	}
	url := "https://" + nodes[0].Admin + "/"
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	poll("the page to ask for the token", `!document.getElementById("login").hidden && document.getElementById("conn").dataset.state === "unauthorized"`)
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	); err != nil {
		t.Fatalf("enter the token: %v", err)
	}
	poll("15 groups with a master", `(() => {
		const rows = [...document.querySelectorAll("#groups tbody tr")];
		return rows.length === 15 && rows.every(r => r.dataset.master !== "0");
	})()`)
	poll("three ready nodes", `(() => {
		const rows = [...document.querySelectorAll("#nodes tbody tr")];
		return rows.length === 3 && rows.every(r => r.dataset.health === "ready");
	})()`)
	poll("every node's build version, and the header's", `(() => {
		const rows = [...document.querySelectorAll("#nodes tbody tr")];
		return rows.every(r => r.dataset.version.includes("go1.")) && document.getElementById("version").textContent.includes("go1.");
	})()`)

	// A lock, and a second client waiting for it.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Client)
	}
	newClient := func() *client.Client {
		cl, err := client.New(ctx, client.Config{Registry: addrs, Namespace: "e2e", Secret: "s", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	const key = "console-browser"
	holder := newClient().Mutex(key, client.TTL(30*time.Second))
	if err := holder.TryLock(ctx); err != nil {
		t.Fatalf("lock %s: %v", key, err)
	}
	g := wire.GroupOf(wire.KeyHash("e2e", key), 15)
	poll("the lock counted in its group", fmt.Sprintf(`document.querySelector('#groups tbody tr[data-group="%d"]').dataset.locks === "1"`, g))
	waiter := newClient().Mutex(key, client.TTL(30*time.Second))
	waited := make(chan error, 1)
	go func() { waited <- waiter.Lock(ctx) }()
	poll("the key among the hottest, with its holder", fmt.Sprintf(`(() => {
		const r = document.querySelector('#hotkeys tbody tr[data-key="e2e/%s"]');
		return r !== null && r.dataset.waiters === "1" && r.innerText.includes(%q);
	})()`, key, holder.Owner().String()))

	poll("the namespace's held key and waiter counted", `(() => {
		const r = document.querySelector('#namespaces tbody tr[data-namespace="e2e"]');
		return r !== null && r.dataset.held === "1" && r.dataset.waiters === "1";
	})()`)
	poll("the holder's client session, and every node's uptime", fmt.Sprintf(`(() => {
		const nodes = [...document.querySelectorAll("#nodes tbody tr")];
		return document.querySelector('#clients tbody tr[data-client="%x"][data-namespace="e2e"]') !== null &&
			nodes.length === 3 && nodes.every(r => Number(r.dataset.uptime) > 0);
	})()`, holder.Owner().Client))
	poll("the waiter's blocked acquire counted on a session", `[...document.querySelectorAll("#clients tbody tr")].some(r => Number(r.dataset.waits) >= 1)`)

	// An election, followed by its key: its leader's value and term.
	leader := newClient().Election("scheduler")
	if err := leader.Campaign(ctx, "host-a:8080"); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS("#election-ns"), "e2e"),
		chromedp.SendKeys(chromedp.CSS("#election-key"), "scheduler"),
		chromedp.Click(chromedp.CSS(`#election-add button[type="submit"]`)),
	); err != nil {
		t.Fatalf("follow the election: %v", err)
	}
	poll("the followed election with its leader's value and term", fmt.Sprintf(`(() => {
		const r = document.querySelector('#elections tbody tr[data-key="scheduler"][data-namespace="e2e"]');
		return r !== null && r.dataset.value === "host-a:8080" && r.dataset.token === "%d";
	})()`, leader.Token()))
	saveShot(bctx, t, "console.png")
	saveShotOf(bctx, t, "#sessions", "console-clients.png")
	if err := leader.Resign(ctx); err != nil {
		t.Errorf("resign: %v", err)
	}

	// Released, the lock goes to the waiter and the key is no longer hot.
	if err := holder.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter's lock: %v", err)
	}
	poll("the key gone from the hottest", `document.querySelector('#hotkeys tbody tr') === null && !document.getElementById("hotkeys-empty").hidden`)
	if err := waiter.Unlock(ctx); err != nil {
		t.Errorf("the waiter's unlock: %v", err)
	}

	// A stuck lock nobody waits for: found by its key, its holder's value
	// shown, force-unlocked from its page.
	stuckKey := consoleStuckKey(bctx, t)
	const value = "job 42 on host-a, pid 7"
	stuck := newClient().Mutex(stuckKey, client.TTL(30*time.Second), client.Value(value))
	if err := stuck.TryLock(ctx); err != nil {
		t.Fatalf("lock %s: %v", stuckKey, err)
	}
	poll("the namespace's held key counted", `document.querySelector('#namespaces tbody tr[data-namespace="e2e"]')?.dataset.held === "1"`)
	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`nav a[href="#find"]`)),
		chromedp.WaitVisible(chromedp.CSS("#find-prefix")),
		chromedp.SendKeys(chromedp.CSS("#find-ns-input"), "e2e"),
		chromedp.SendKeys(chromedp.CSS("#find-prefix"), stuckKey),
		chromedp.Click(chromedp.CSS(`#find button[type="submit"]`)),
	); err != nil {
		t.Fatalf("search for %s: %v", stuckKey, err)
	}
	poll("the key found, with its holder's value", fmt.Sprintf(`(() => {
		const r = document.querySelector('#find-results tbody tr[data-key=%q]');
		return r !== null && r.innerText.includes(%q);
	})()`, stuckKey, value))
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#find-results tbody tr[data-key=%q] a`, stuckKey)))); err != nil {
		t.Fatalf("open the lock's page: %v", err)
	}
	poll("the lock's page with its holder's value and token", fmt.Sprintf(`(() => {
		const r = document.querySelector('#lock-holders tbody tr');
		return document.getElementById("lock-state").dataset.held === "true" && r !== null &&
			r.dataset.value === %q && r.dataset.owner === %q && r.innerText.includes(%q) &&
			!document.getElementById("lock-waiters-empty").hidden;
	})()`, value, stuck.Owner().String(), fmt.Sprint(stuck.Token())))
	saveShot(bctx, t, "console-lock.png")

	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#unlock"))); err != nil {
		t.Fatalf("force-unlock: %v", err)
	}
	poll("the confirmation", `!document.getElementById("unlock-confirm").hidden`)
	select {
	case <-stuck.Lost():
		t.Fatal("the lock was lost before the confirmation")
	default:
	}
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#unlock-yes"))); err != nil {
		t.Fatalf("confirm the force-unlock: %v", err)
	}
	poll("the lock shown free", `document.getElementById("lock-state").dataset.held === "false" &&
		document.getElementById("unlock-result").innerText.startsWith("Released 1 hold")`)
	select {
	case <-stuck.Lost():
	case <-ctx.Done():
		t.Fatal("the holder was not told it lost the lock")
	}
	other := newClient().Mutex(stuckKey, client.TTL(30*time.Second))
	if err := other.TryLock(ctx); err != nil {
		t.Fatalf("the key after the force-unlock: %v, want it free", err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Errorf("unlock after the force-unlock: %v", err)
	}
}

// consoleStuckKey returns a key of namespace e2e whose group the page's
// node (node 1) does not master, read from the page's groups, so that its
// lock page and force-unlock go through the page's node to another; a
// key of node 1's when it masters every group.
func consoleStuckKey(bctx context.Context, t *testing.T) string {
	t.Helper()
	masters, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#groups tbody tr")].map(r => [r.dataset.group, r.dataset.master]))`))
	if err != nil {
		t.Fatalf("read the groups' masters: %v", err)
	}
	for i := range 200 {
		k := fmt.Sprintf("stuck/job-%d", i)
		if m := masters[fmt.Sprint(wire.GroupOf(wire.KeyHash("e2e", k), 15))]; m != "" && m != "1" {
			return k
		}
	}
	t.Logf("node 1 masters every group: the lock's page is served without forwarding")
	return "stuck/job-0"
}

// saveShot saves a full-page screenshot as name under $PAXLOCK_ARTIFACTS
// (the test's temporary directory when unset).
func saveShot(bctx context.Context, t *testing.T, name string) {
	t.Helper()
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	writeShot(t, name, shot)
}

// saveShotOf saves a screenshot of the element sel (CSS) as saveShot
// does.
func saveShotOf(bctx context.Context, t *testing.T, sel, name string) {
	t.Helper()
	shot, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot of %s: %v", sel, err)
	}
	writeShot(t, name, shot)
}

// writeShot writes a screenshot as name under $PAXLOCK_ARTIFACTS.
func writeShot(t *testing.T, name string, shot []byte) {
	t.Helper()
	out := os.Getenv("PAXLOCK_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the console: %s (%d bytes)", path, len(shot))
}
