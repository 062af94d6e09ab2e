package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// adminGet returns the body of an admin endpoint.
// adminGetOK returns the body of a GET on the admin endpoint, failing the
// test unless it answers 200.
func adminGetOK(t *testing.T, addr, path string) []byte {
	t.Helper()
	code, body, err := adminGet(t, addr, path)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, code, err)
	}
	return []byte(body)
}

func adminStatus(t *testing.T, addr string) adminapi.Status {
	t.Helper()
	var st adminapi.Status
	if err := json.Unmarshal(adminGetOK(t, addr, "/status"), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStorageFailureReported: when node 1's WAL writes fail, node 1 stops
// its groups and says so in /status and /metrics, and nodes 2 and 3 serve
// every group to clients.
func TestStorageFailureReported(t *testing.T) {
	t.Parallel()
	faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSync ||
			op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo || op.Kind == errorfs.OpFileWriteAt) {
			return errorfs.ErrInjected
		}
		return nil
	})}
	tc := startClusterWith(t, 3, func(c *Config) {
		if c.NodeID == 1 {
			c.storeFS = errorfs.Wrap(vfs.Default, faults)
		}
	})
	admin := tc.cfgs[0].AdminAddr
	if st := adminStatus(t, admin); st.StorageFailed || st.StorageError != "" {
		t.Fatalf("healthy node reports %+v", st)
	}
	if m := string(adminGetOK(t, admin, "/metrics")); !strings.Contains(m, "paxlock_storage_failed 0\n") {
		t.Fatalf("metrics of a healthy node:\n%s", m)
	}
	// A key in every group.
	keys := map[int]string{}
	for i := 0; len(keys) < 15; i++ {
		k := fmt.Sprintf("k%d", i)
		if g := wire.GroupOf(wire.KeyHash("ns", k), 15); keys[g] == "" {
			keys[g] = k
		}
	}
	c := newClient(t, tc)
	ctx := ctxT(t)
	lockAll := func() {
		for g := range 15 {
			m := c.Mutex(keys[g], client.TTL(10*time.Second))
			for {
				err := m.Lock(ctx)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("lock %s (group %d): %v", keys[g], g, err)
				}
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatalf("unlock %s: %v", keys[g], err)
			}
		}
	}
	lockAll()

	// Every lock writes to node 1 too, master or follower: the first one
	// fails its store.
	faults.On()
	lockAll()
	waitFor(t, "node 1 reports its storage failure", func() bool { return adminStatus(t, admin).StorageFailed })
	st := adminStatus(t, admin)
	if !strings.Contains(st.StorageError, "injected") {
		t.Errorf("storage error %q does not name the cause", st.StorageError)
	}
	for _, g := range st.Groups {
		if g.Serving {
			t.Errorf("failed node serves group %d", g.Group)
		}
	}
	if m := string(adminGetOK(t, admin, "/metrics")); !strings.Contains(m, "paxlock_storage_failed 1\n") {
		t.Errorf("metrics of the failed node:\n%s", m)
	}
	for _, cfg := range tc.cfgs[1:] {
		if st := adminStatus(t, cfg.AdminAddr); st.StorageFailed {
			t.Errorf("node %d reports a storage failure: %s", st.Node, st.StorageError)
		}
	}
	// Nodes 2 and 3 master every group and serve clients in each.
	waitFor(t, "nodes 2 and 3 master every group", func() bool {
		return countServing(tc.nodes[1])+countServing(tc.nodes[2]) == 15
	})
	lockAll()
}
