package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// ctlTool runs paxlockctl against a secure cluster's admin endpoints.
type ctlTool struct {
	t     *testing.T
	bin   string
	certs string
}

// run runs paxlockctl with args and returns its standard output; the test
// fails on a non-zero exit.
func (c ctlTool) run(args ...string) string {
	c.t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("paxlockctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// admin is run with the flags that reach admins over HTTPS with the token.
func (c ctlTool) admin(admins []string, args ...string) string {
	c.t.Helper()
	return c.run(c.adminArgs(admins, args)...)
}

// tryAdmin is admin that returns a failure instead of failing the test.
func (c ctlTool) tryAdmin(admins []string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(c.bin, c.adminArgs(admins, args)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("paxlockctl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func (c ctlTool) adminArgs(admins, args []string) []string {
	return append(args, "-admin", strings.Join(admins, ","), "-admin-ca", filepath.Join(c.certs, "ca.crt"),
		"-admin-token-file", filepath.Join(c.certs, "admin.token"))
}

// secureConfig is node id's configuration on a secure cluster whose
// material is in certs: peer mutual TLS, admin HTTPS with the token,
// encrypted gossip.
func secureConfig(dir, certs string, id int, nodes []nodeAddrs, admin string) map[string]any {
	return map[string]any{
		"node_id":          id,
		"data_dir":         filepath.Join(dir, fmt.Sprintf("data%d", id)),
		"nodes":            nodes,
		"namespaces":       []map[string]string{{"name": "e2e", "secret": "s"}},
		"min_ttl":          "500ms",
		"admin_addr":       admin,
		"tls":              map[string]string{"ca": filepath.Join(certs, "ca.crt"), "cert": filepath.Join(certs, fmt.Sprintf("node%d.crt", id)), "key": filepath.Join(certs, fmt.Sprintf("node%d.key", id))},
		"admin_tls":        map[string]string{},
		"admin_token_file": filepath.Join(certs, "admin.token"),
		"gossip_key_file":  filepath.Join(certs, "gossip.key"),
	}
}

// startSecure writes cfg as node id's configuration and starts it with
// args.
func (c *cluster) startSecure(id int, cfg map[string]any, client, admin string, args ...string) *proc {
	b, err := json.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.dir, fmt.Sprintf("n%d.json", id))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	p := &proc{id: id, cfg: path, addr: client, admin: admin, args: args}
	c.procs = append(c.procs, p)
	c.start(p)
	return p
}

// TestAddNodeSecure follows docs/operations.md's add-node and remove-node
// procedures on a secure cluster with the project's tools only: paxlockctl
// certs makes the cluster's material, paxlockctl certs node 4 issues the
// new node's certificate from that CA, paxlockd -join adds it, paxlockctl
// member remove takes node 1 out, all under lock traffic, which keeps
// being granted; at the end the three remaining nodes serve every group.
func TestAddNodeSecure(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the cross-process suites")
	}
	dir := t.TempDir()
	c := newCluster(t, buildPaxlockd(t, dir), dir)
	ctl := ctlTool{t: t, bin: filepath.Join(dir, "paxlockctl"), certs: filepath.Join(dir, "certs")}
	if out, err := exec.Command("go", "build", "-o", ctl.bin, "github.com/paxlock/paxlock/cmd/paxlockctl").CombinedOutput(); err != nil {
		t.Fatalf("build paxlockctl: %v: %s", err, out)
	}
	ctl.run("certs", "-out", ctl.certs, "-nodes", "3", "-hosts", "127.0.0.1,localhost")
	var nodes []nodeAddrs
	for i := 1; i <= 4; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), Gossip: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= 3; i++ {
		c.startSecure(i, secureConfig(dir, ctl.certs, i, nodes[:3], nodes[i-1].Admin), nodes[i-1].Client, nodes[i-1].Admin)
	}
	admins := func(ids ...int) []string {
		var out []string
		for _, id := range ids {
			out = append(out, nodes[id-1].Admin)
		}
		return out
	}
	ctl.admin(admins(1, 2, 3), "wait", "-timeout", "1m")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.newClient(ctx)
	defer cl.Close()
	var granted, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := cl.Mutex(fmt.Sprintf("secure-%d-%d", w, i%10), client.TTL(10*time.Second))
				if err := m.Lock(ctx); err != nil {
					failed.Add(1)
					continue
				}
				granted.Add(1)
				_ = m.Unlock(ctx) // a failed release leaves the key for its TTL; the check is on grants
			}
		}()
	}
	grantsGrow := func(what string) {
		t.Helper()
		before := granted.Load()
		c.waitUntil(what+": clients granted again", time.Minute, func() bool { return granted.Load() > before+20 })
	}
	grantsGrow("start")

	// Add node 4: its certificate from the cluster's CA, then -join.
	ctl.run("certs", "node", "4", "-out", ctl.certs, "-hosts", "127.0.0.1,localhost")
	c.startSecure(4, secureConfig(dir, ctl.certs, 4, nodes[3:4], nodes[3].Admin), nodes[3].Client, nodes[3].Admin, "-join", nodes[2].Admin)
	c.waitUntil("node 4 a member of every group", 2*time.Minute, func() bool {
		return memberEverywhere(ctl, admins(1, 2, 3, 4), 4)
	})
	grantsGrow("node 4 added")

	// Remove node 1, then stop it.
	ctl.admin(admins(2, 3, 4), "member", "remove", "1")
	c.stop(c.procs[0], 30*time.Second)
	ctl.admin(admins(2, 3, 4), "wait", "-timeout", "1m")
	grantsGrow("node 1 removed")
	close(stop)
	wg.Wait()
	t.Logf("%d grants, %d failed acquires (each retried by the next loop)", granted.Load(), failed.Load())
}

// memberEverywhere reports whether the member list says node id is a
// member of every group.
func memberEverywhere(ctl ctlTool, admins []string, id int) bool {
	var rep struct {
		Members []struct {
			ID    int    `json:"id"`
			State string `json:"state"`
		} `json:"members"`
		Groups []struct {
			Members []int `json:"members"`
		} `json:"groups"`
	}
	out, err := ctl.tryAdmin(admins, "member", "list", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil {
		return false
	}
	member := false
	for _, m := range rep.Members {
		if m.ID == id && m.State == "member" {
			member = true
		}
	}
	if !member || len(rep.Groups) == 0 {
		return false
	}
	for _, g := range rep.Groups {
		found := false
		for _, m := range g.Members {
			found = found || m == id
		}
		if !found {
			return false
		}
	}
	return true
}
