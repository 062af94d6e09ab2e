package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// heldLock is what a test recorded of a lock it took.
type heldLock struct {
	ns, key, value string
	owner          wire.Owner
	token          uint64
}

// parallel runs f(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(n, workers int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func clientFor(t testing.TB, tc *testCluster, ns, secret string) *client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: ns, Secret: secret, Logger: testLogger(), MaxRetries: testMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fetchBackup GETs /backup from admin into a file in dir and returns its
// path.
func fetchBackup(t testing.TB, admin, dir string) string {
	t.Helper()
	// 503: a group between masters (a lease lapsed on a loaded machine);
	// the backup is asked again, as an operator would, for up to 30 s.
	var resp *http.Response
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		resp, err = http.Get("http://" + admin + "/backup")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /backup: HTTP %d: %s", resp.StatusCode, b)
	}
	path := filepath.Join(dir, "cluster.backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBackupRestoreRoundTrip: locks held with values in two namespaces
// (one of them added at run time, so it lives only in the namespace
// table) across every group are backed up through GET /backup; a new
// three-node cluster restored from the file shows every key with the
// same holder, token and value, still held; the restored namespace
// authenticates; and every token granted afterwards exceeds every token
// in the backup, in every group.
func TestBackupRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	// Some 130 holds a group over two namespaces: every group's image
	// has many records of both. A larger n only loads the machine, and
	// starves the other tests' clusters of their leases.
	n := 2000
	if testing.Short() {
		n = 1000
	}
	tc := startCluster(t, 3)
	admin := tc.cfgs[0].Nodes[0].Admin
	waitFor(t, "configured namespaces installed", func() bool { return tc.nodes[0].svc.NamespacesInitialised() })
	if code := adminDo(t, http.MethodPost, "http://"+admin+"/namespaces", map[string]string{"name": "tenant", "secret": "pw"}); code != http.StatusNoContent {
		t.Fatalf("add namespace: HTTP %d", code)
	}
	for _, s := range tc.nodes {
		waitFor(t, "the namespace on every node", func() bool { return s.svc.HasNamespace("tenant") })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := map[string]*client.Client{"ns": clientFor(t, tc, "ns", "s3cret"), "tenant": clientFor(t, tc, "tenant", "pw")}
	locks := make([]heldLock, n)
	err := parallel(n, 32, func(i int) error {
		ns := "ns"
		if i%3 == 0 {
			ns = "tenant"
		}
		l := heldLock{ns: ns, key: fmt.Sprintf("job/%05d", i)}
		if i%2 == 0 {
			l.value = fmt.Sprintf("worker-%d", i)
		}
		m := cs[ns].Mutex(l.key, client.TTL(10*time.Minute), client.Value(l.value))
		// A group may be between masters on a loaded machine: the
		// client's own retries can run out before a lease does.
		err := m.TryLock(ctx)
		for errors.Is(err, client.ErrNoMaster) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			err = m.TryLock(ctx)
		}
		if err != nil {
			return fmt.Errorf("lock %s/%s: %w", ns, l.key, err)
		}
		l.owner, l.token = m.Owner(), m.Token()
		locks[i] = l
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var maxOld uint64
	for _, l := range locks {
		maxOld = max(maxOld, l.token)
	}
	oldVersions := make([]uint64, len(tc.nodes[0].svc.Groups()))
	for g, lg := range tc.nodes[0].svc.Groups() {
		oldVersions[g] = lg.StateMachine().Version()
	}

	dir := t.TempDir()
	file := fetchBackup(t, admin, dir)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	info, err := group.ReadBackup(f, group.BackupVisitor{})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var inBackup int64
	for _, g := range info.Groups {
		inBackup += g.Locks
		if g.Locks == 0 {
			t.Errorf("group %d: no locks in the backup", g.Group)
		}
		if !g.Master {
			t.Errorf("group %d: image not from its master", g.Group)
		}
	}
	if inBackup != int64(n) || info.Header.Cluster != "paxlock" || info.Header.Node != 1 || len(info.Groups) != 15 {
		t.Fatalf("backup holds %d locks (want %d), header %+v, %d groups", inBackup, n, info.Header, len(info.Groups))
	}
	for i := range tc.nodes {
		tc.stop(i)
	}
	for _, c := range cs { // their holds are in the backup; the old cluster is gone
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		_ = c.CloseContext(cctx)
		ccancel()
	}

	tc2 := startClusterWith(t, 3, func(cfg *Config) {
		if _, err := Restore(*cfg, file, testLogger()); err != nil {
			t.Fatalf("restore node %d: %v", cfg.NodeID, err)
		}
	})
	for g, lg := range tc2.nodes[0].svc.Groups() {
		if v := lg.StateMachine().Version(); v != oldVersions[g]+1 {
			t.Errorf("group %d: version %d after restore, want %d", g, v, oldVersions[g]+1)
		}
	}
	cs2 := map[string]*client.Client{"ns": clientFor(t, tc2, "ns", "s3cret"), "tenant": clientFor(t, tc2, "tenant", "pw")}
	err = parallel(n, 32, func(i int) error {
		l := locks[i]
		st, err := cs2[l.ns].State(ctx, l.key)
		if err != nil {
			return fmt.Errorf("state %s/%s: %w", l.ns, l.key, err)
		}
		if !st.Held || st.Holder != l.owner || st.Token != l.token || st.Value != l.value {
			return fmt.Errorf("%s/%s after restore: held %v holder %v token %#x value %q; before: holder %v token %#x value %q",
				l.ns, l.key, st.Held, st.Holder, st.Token, st.Value, l.owner, l.token, l.value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A restored hold is still held: another client cannot take it.
	if err := cs2["ns"].Mutex(locks[1].key).TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of a restored held key: %v, want ErrLocked", err)
	}
	// New grants, in every group, have tokens above all of the backup's.
	groups := map[int]bool{}
	for i := 0; len(groups) < 15; i++ {
		key := fmt.Sprintf("new/%d", i)
		g := wire.GroupOf(wire.KeyHash("tenant", key), 15)
		if groups[g] {
			continue
		}
		groups[g] = true
		m := cs2["tenant"].Mutex(key)
		if err := m.TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		if m.Token() <= maxOld {
			t.Fatalf("group %d: new token %#x not above the backup's highest %#x", g, m.Token(), maxOld)
		}
	}
}

// TestRestoreRefuses: a non-empty data directory, a file of another
// cluster or group count, a corrupt or truncated file, and a file that is
// no backup are refused with a clear error, and nothing is written.
func TestRestoreRefuses(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	c := newClient(t, tc)
	ctx := ctxT(t)
	if err := c.Mutex("a", client.Value("v")).TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := fetchBackup(t, tc.cfgs[1].Nodes[1].Admin, dir)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tc.cfgs[0]
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)/2] ^= 0x40
	for _, tt := range []struct {
		name string
		file string
		tune func(*Config)
		want error
	}{
		{"data dir not empty", file, func(c *Config) {
			if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(c.DataDir, "keep"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrDataDirNotEmpty},
		{"other cluster", file, func(c *Config) { c.ClusterName = "elsewhere" }, group.ErrBadBackup},
		{"other group count", file, func(c *Config) { c.Groups = 7 }, group.ErrBadBackup},
		{"corrupt", write("corrupt", corrupt), nil, group.ErrBadBackup},
		{"truncated", write("truncated", good[:len(good)-10]), nil, group.ErrBadBackup},
		{"not a backup", write("config", []byte(`{"node_id": 1}`)), nil, group.ErrBadBackup},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.DataDir = filepath.Join(t.TempDir(), "data")
			if tt.tune != nil {
				tt.tune(&c)
			}
			before, _ := os.ReadDir(c.DataDir)
			_, err := Restore(c, tt.file, testLogger())
			if !errors.Is(err, tt.want) {
				t.Fatalf("Restore: %v, want %v", err, tt.want)
			}
			t.Log(err)
			after, _ := os.ReadDir(c.DataDir)
			if len(after) != len(before) {
				t.Fatalf("data dir had %d entries, has %d after a refused restore", len(before), len(after))
			}
		})
	}
	// The good file restores.
	c2 := cfg
	c2.DataDir = filepath.Join(t.TempDir(), "data")
	info, err := Restore(c2, file, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	var locks int64
	for _, g := range info.Groups {
		locks += g.Locks
	}
	if locks != 1 {
		t.Fatalf("restored %d locks, want 1", locks)
	}
}
