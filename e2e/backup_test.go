package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// startNodes writes the configs of a 3-node cluster on fresh ports under
// c.dir and starts the nodes with paxlockd's extra arguments.
func startNodes(c *cluster, extra ...string) {
	var nodes []nodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(c.t), Client: freePort(c.t), Admin: freePort(c.t)})
	}
	for i := 1; i <= 3; i++ {
		cfg := map[string]any{
			"node_id":    i,
			"data_dir":   filepath.Join(c.dir, fmt.Sprintf("data%d", i)),
			"nodes":      nodes,
			"namespaces": []map[string]string{{"name": "e2e", "secret": "s"}},
			"admin_addr": nodes[i-1].Admin,
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			c.t.Fatal(err)
		}
		path := filepath.Join(c.dir, fmt.Sprintf("n%d.json", i))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			c.t.Fatal(err)
		}
		p := &proc{id: i, cfg: path, addr: nodes[i-1].Client, admin: nodes[i-1].Admin}
		f, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			c.t.Fatal(err)
		}
		cmd := exec.Command(c.bin, append([]string{"-config", path, "-log-level", "warn"}, extra...)...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			f.Close()
			c.t.Fatal(err)
		}
		p.cmd, p.log = cmd, f
		c.procs = append(c.procs, p)
	}
}

func e2eClient(ctx context.Context, t *testing.T, c *cluster) *client.Client {
	for _, p := range c.procs {
		c.waitUntil(fmt.Sprintf("node %d ready", p.id), time.Minute, func() bool {
			resp, err := http.Get("http://" + p.admin + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var cl *client.Client
	var err error
	for range 150 {
		if cl, err = client.New(ctx, client.Config{Registry: c.addrs(), Namespace: "e2e", Secret: "s", Logger: quiet}); err == nil {
			return cl
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// TestBackupRestoreProcesses: paxlockctl backup against three paxlockd
// processes holding locks, then three new processes started with
// paxlockd -restore: the locks are held with their values, a new lock's
// token is above the old ones, and a node refuses -restore on its
// now non-empty data directory.
func TestBackupRestoreProcesses(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e, make backup-check) to run the process-level backup test")
	}
	dir := t.TempDir()
	bin := buildPaxlockd(t, dir)
	ctl := filepath.Join(dir, "paxlockctl")
	build := exec.Command("go", "build", "-o", ctl, "github.com/paxlock/paxlock/cmd/paxlockctl")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build paxlockctl: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	old := newCluster(t, bin, filepath.Join(dir, "old"))
	if err := os.MkdirAll(old.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	startNodes(old)
	cl := e2eClient(ctx, t, old)
	tokens := map[string]uint64{}
	var maxOld uint64
	for i := range 100 {
		key := fmt.Sprintf("bk/%03d", i)
		m := cl.Mutex(key, client.TTL(5*time.Minute), client.Value("v"+key))
		if err := m.TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		tokens[key] = m.Token()
		maxOld = max(maxOld, m.Token())
	}
	var admins []string
	for _, p := range old.procs {
		admins = append(admins, p.admin)
	}
	file := filepath.Join(dir, "cluster.backup")
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, ctl, "backup", file, "-o", "json", "-admin", strings.Join(admins, ","), "-admin-ca", "")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("paxlockctl backup: %v: %s", err, errb.String())
	}
	var res struct {
		Locks  int64 `json:"locks"`
		Groups []struct {
			Master bool `json:"master"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("paxlockctl backup output %q: %v", out.String(), err)
	}
	if res.Locks != 100 || len(res.Groups) != 15 {
		t.Fatalf("backup: %s", out.String())
	}
	// A second backup to the same file is refused: never overwritten.
	if err := exec.CommandContext(ctx, ctl, "backup", file, "-admin", strings.Join(admins, ","), "-admin-ca", "").Run(); err == nil {
		t.Fatal("paxlockctl backup overwrote a file")
	}
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	_ = cl.CloseContext(cctx) // the old cluster goes; its holds are in the backup
	ccancel()
	old.stopAll()

	restored := newCluster(t, bin, filepath.Join(dir, "new"))
	if err := os.MkdirAll(restored.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	startNodes(restored, "-restore", file)
	cl2 := e2eClient(ctx, t, restored)
	defer cl2.Close()
	for key, tok := range tokens {
		var st client.State
		var err error
		for range 50 {
			if st, err = cl2.State(ctx, key); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held || st.Token != tok || st.Value != "v"+key {
			t.Fatalf("%s after restore: %+v, want token %#x value %q", key, st, tok, "v"+key)
		}
	}
	m := cl2.Mutex("bk/new")
	if err := m.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Token() <= maxOld {
		t.Fatalf("token %#x after restore, backup's highest %#x", m.Token(), maxOld)
	}
	// Restarting a node with -restore on its data directory is refused.
	p := restored.procs[0]
	restored.stop(p, 10*time.Second)
	again := exec.CommandContext(ctx, bin, "-config", p.cfg, "-restore", file)
	msg, err := again.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(msg), "not empty") {
		t.Fatalf("-restore on a used data directory: %v: %s", err, msg)
	}
}
