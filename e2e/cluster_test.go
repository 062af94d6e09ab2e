package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// This file runs paxlockd processes for the fault suites: TestFaults and
// BenchmarkFailover on loopback, TestChaos in network namespaces.

// proc is one paxlockd process of a cluster.
type proc struct {
	id    int
	cfg   string
	cmd   *exec.Cmd
	log   *os.File
	addr  string // client address
	admin string
	// netns is the network namespace the node runs in ("" for the
	// test's own).
	netns string
	// args are more paxlockd flags (-join).
	args []string
}

type cluster struct {
	t     testing.TB
	bin   string
	dir   string
	procs []*proc
}

// nodeAddrs is a member's entry in the nodes list of a config.
type nodeAddrs struct {
	ID     int    `json:"id"`
	Peer   string `json:"peer"`
	Client string `json:"client"`
	// ClientTLS is the TLS client listener (relays between nodes whose
	// peers run TLS use it).
	ClientTLS string `json:"client_tls_addr,omitempty"`
	Gossip    string `json:"gossip,omitempty"`
	Admin     string `json:"admin,omitempty"`
}

func freePort(t testing.TB) string {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		// Below the ephemeral range: see server's tests.
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(10000))
		if handedOut.ports[addr] {
			// Free again once its listener closed, but a node of this
			// test may be about to bind it: two nodes given one port
			// leave one of them unable to start (a test then waits out
			// its readiness limit).
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			handedOut.ports[addr] = true
			return addr
		}
	}
}

// handedOut remembers every port freePort returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// buildPaxlockd builds paxlockd into dir and returns its path.
func buildPaxlockd(t testing.TB, dir string) string {
	bin := filepath.Join(dir, "paxlockd")
	build := exec.Command("go", "build", "-o", bin, "github.com/paxlock/paxlock/cmd/paxlockd")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build paxlockd: %v", err)
	}
	return bin
}

// newCluster returns an empty cluster that runs bin with its files in dir
// and kills every process it started when the test ends.
func newCluster(t testing.TB, bin, dir string) *cluster {
	c := &cluster{t: t, bin: bin, dir: dir}
	t.Cleanup(c.stopAll)
	return c
}

// e2eRelaySecret is the relay secret the nodes share: their peers run
// without TLS, so relays between them prove it.
const e2eRelaySecret = "e2e-cluster-relay-secret"

// add writes node id's config (the common settings, the members, and
// extra) and starts it.
func (c *cluster) add(id int, nodes []nodeAddrs, admin, netns string, extra map[string]any) *proc {
	relaySecret := filepath.Join(c.dir, "relay.secret")
	if err := os.WriteFile(relaySecret, []byte(e2eRelaySecret), 0o600); err != nil {
		c.t.Fatal(err)
	}
	cfg := map[string]any{
		"node_id":           id,
		"data_dir":          filepath.Join(c.dir, fmt.Sprintf("data%d", id)),
		"nodes":             nodes,
		"namespaces":        []map[string]string{{"name": "e2e", "secret": "s"}},
		"min_ttl":           "500ms",
		"admin_addr":        admin,
		"relay_secret_file": relaySecret,
	}
	for k, v := range extra {
		cfg[k] = v
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.dir, fmt.Sprintf("n%d.json", id))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	p := &proc{id: id, cfg: path, addr: nodes[id-1].Client, admin: admin, netns: netns}
	c.procs = append(c.procs, p)
	c.start(p)
	return p
}

// startCluster builds paxlockd and starts n nodes on loopback with the
// fault-injection endpoint enabled. Each node knows the others' admin
// addresses, so an admin request to one that does not serve a key's
// group is redirected to the one that does.
func startCluster(t testing.TB, n int) *cluster {
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with extra settings in every node's
// configuration.
func startClusterWith(t testing.TB, n int, extra map[string]any) *cluster {
	dir := t.TempDir()
	c := newCluster(t, buildPaxlockd(t, dir), dir)
	var nodes []nodeAddrs
	for i := 1; i <= n; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= n; i++ {
		cfg := map[string]any{"fault_injection": true}
		for k, v := range extra {
			cfg[k] = v
		}
		c.add(i, nodes, nodes[i-1].Admin, "", cfg)
	}
	return c
}

// newClient connects a client to the cluster (namespace "e2e", its log
// discarded), retrying while the nodes start; the caller closes it.
func (c *cluster) newClient(ctx context.Context) *client.Client {
	c.t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	for range 100 {
		var cl *client.Client
		if cl, err = client.New(ctx, client.Config{Registry: c.addrs(), Namespace: "e2e", Secret: "s", Logger: quiet}); err == nil {
			return cl
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatal(err)
	return nil
}

// stopAll kills every running node (resuming paused ones first).
func (c *cluster) stopAll() {
	for _, p := range c.procs {
		if p.cmd != nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // it may not be paused; kill follows
			c.kill(p)
		}
	}
}

func (c *cluster) start(p *proc) {
	f, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", p.id)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := append([]string{"-config", p.cfg, "-log-level", "warn"}, p.args...)
	name := c.bin
	if p.netns != "" {
		// ip netns exec enters the namespace and execs paxlockd in the
		// same process: signals to cmd.Process reach paxlockd itself.
		name, args = "ip", append([]string{"netns", "exec", p.netns, c.bin}, args...)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// A test binary that dies (timeout panic, signal) takes its nodes
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		c.t.Fatal(err)
	}
	p.cmd, p.log = cmd, f
}

func (c *cluster) kill(p *proc) {
	// SIGKILL: no shutdown, no flush. Wait reports the kill as an error
	// ("signal: killed"); a process that had already died is as good.
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Errorf("kill node %d: %v", p.id, err)
	}
	_ = p.cmd.Wait()
	p.log.Close()
	p.cmd = nil
}

// stop ends node p with SIGTERM (a clean shutdown), or SIGKILL if it has
// not exited within limit.
func (c *cluster) stop(p *proc, limit time.Duration) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Errorf("stop node %d: %v", p.id, err)
	}
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait() // the exit status of a stopped node is not checked
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill() // it may exit meanwhile
		<-done
	}
	p.log.Close()
	p.cmd = nil
}

// partition cuts node p's Paxos traffic to and from the given peers (none:
// heal) through its fault-injection endpoint. Clients still reach p.
func (c *cluster) partition(p *proc, peers ...int) {
	var ids []string
	for _, id := range peers {
		ids = append(ids, strconv.Itoa(id))
	}
	resp, err := http.Post("http://"+p.admin+"/debug/partition?"+url.Values{"cut": {strings.Join(ids, ",")}}.Encode(), "application/json", nil)
	if err != nil {
		c.t.Fatalf("partition node %d: %v", p.id, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("partition node %d: %s", p.id, resp.Status)
	}
}

// waitUntil polls cond until it holds, failing the test after limit.
func (c *cluster) waitUntil(what string, limit time.Duration, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// admins returns the nodes' admin addresses.
func (c *cluster) admins() []string {
	var out []string
	for _, p := range c.procs {
		out = append(out, p.admin)
	}
	return out
}

func (c *cluster) addrs() []string {
	var out []string
	for _, p := range c.procs {
		out = append(out, p.addr)
	}
	return out
}
