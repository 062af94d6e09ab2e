package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/registry"
)

// moverTTL is the test movers' lock TTL: two of the meta cluster's
// leases, so that a master's lapse for a lease on a loaded machine does
// not cost the driving registry its lock.
const moverTTL = 2 * testLease

// startMover starts a registry that takes its tables from the meta
// cluster and drives namespace moves through the meta nodes' admin API,
// its mover lock's TTL moverTTL.
func startMover(t *testing.T, meta *testCluster) *registry.Standalone {
	t.Helper()
	var admin []string
	for _, c := range meta.cfgs {
		admin = append(admin, c.AdminAddr)
	}
	return startRegistryWith(t, meta.clientAddrs(), func(c *registry.StandaloneConfig) {
		c.AdminListen = ""
		c.Meta.Admin, c.Meta.MoverTTL = admin, moverTTL
	})
}

// registryMove reads namespace ns's move record from a meta node.
func registryMove(url, ns string) (adminapi.RegistryMove, bool, error) {
	resp, err := http.Get(url + "/registry")
	if err != nil {
		return adminapi.RegistryMove{}, false, err
	}
	defer resp.Body.Close()
	var reg adminapi.Registry
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil {
		return adminapi.RegistryMove{}, false, err
	}
	for _, m := range reg.Moves {
		if m.Namespace == ns {
			return m, true, nil
		}
	}
	return adminapi.RegistryMove{}, false, nil
}

// TestMoveDrivenByRegistry: a move recorded in the meta cluster is
// driven to its end by the registry that holds the mover lock, there
// and back: a holder keeps its lock (same token, renewable at the new
// cluster, its validity never extended by a refused renewal), every
// token granted after a move exceeds every token granted before it, and
// the second move is driven by the other registry once the first one
// stopped.
func TestMoveDrivenByRegistry(t *testing.T) {
	t.Parallel()
	meta := startMeta(t, 1)
	a := startCluster(t, 1)
	b := startClusterWith(t, 1, func(c *Config) { c.Groups = 7 })
	metaAdmin := "http://" + meta.cfgs[0].AdminAddr
	adminOK(t, http.MethodPut, metaAdmin+"/registry/clusters/a", adminapi.RegistryClusterPut{Client: a.clientAddrs(), Admin: []string{a.cfgs[0].AdminAddr}})
	adminOK(t, http.MethodPut, metaAdmin+"/registry/clusters/b", adminapi.RegistryClusterPut{Client: b.clientAddrs(), Admin: []string{b.cfgs[0].AdminAddr}})
	adminOK(t, http.MethodPut, metaAdmin+"/registry/namespaces/app", adminapi.RegistryNamespacePut{Cluster: "a", Secret: "app-secret"})
	r1, r2 := startMover(t, meta), startMover(t, meta)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := client.Config{Registry: []string{r1.Addr().String(), r2.Addr().String()}, Namespace: "app", Secret: "app-secret",
		Logger: testLogger(), RequestTimeout: 2 * time.Second, DialTimeout: time.Second, ViewRefresh: 500 * time.Millisecond}
	var c *client.Client
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		var err error
		c, err = client.New(ctx, cfg)
		return err == nil, fmt.Sprint(err)
	}, "a client of the namespace connects through the registries")
	defer c.Close()

	// The hold must outlive the moves on a loaded machine: a move that
	// freezes the namespace for longer than the TTL costs the holder its
	// lock, as it should (its renewals wait out the freeze).
	held := c.Mutex("held", client.TTL(time.Minute))
	if err := held.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := held.Token()
	maxTok := tok
	grant := func(key string) uint64 {
		t.Helper()
		m := c.Mutex(key)
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("lock %s: %v", key, err)
		}
		tk := m.Token()
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("unlock %s: %v", key, err)
		}
		return tk
	}
	for i := range 20 {
		maxTok = max(maxTok, grant(fmt.Sprintf("k%d", i)))
	}

	// The driving registry keeps the mover lock (it renews it) well past
	// its TTL.
	var first *registry.Standalone
	testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
		for _, r := range []*registry.Standalone{r1, r2} {
			if r.Report().Mover {
				first = r
				return true, ""
			}
		}
		return false, "no registry drives"
	}, "a registry takes the mover lock")
	tok0 := first.Report().MoverToken
	time.Sleep(3 * moverTTL)
	if rep := first.Report(); !rep.Mover || rep.MoverToken != tok0 {
		t.Fatalf("the driving registry lost its mover lock within 3 TTLs: %+v (token was %d)", rep, tok0)
	}

	for i, hop := range []struct{ from, to string }{{"a", "b"}, {"b", "a"}} {
		if i == 1 {
			// The registry that drove the first move stops: the other
			// takes the mover lock and drives the second.
			leader, other := r1, r2
			if !r1.Report().Mover {
				leader, other = r2, r1
			}
			if !leader.Report().Mover {
				t.Fatal("no registry says it holds the mover lock")
			}
			if err := leader.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
				rep := other.Report()
				return rep.Mover, fmt.Sprintf("%+v", rep)
			}, "the other registry takes the mover lock")
		}
		cur, _, err := registryMove(metaAdmin, "app")
		if err != nil {
			t.Fatal(err)
		}
		adminOK(t, http.MethodPut, metaAdmin+"/registry/moves/app", adminapi.RegistryMove{Namespace: "app", ID: uint64(i + 1),
			From: hop.from, To: hop.to, State: adminapi.MovePrepare, Token: cur.Token})
		testutil.EventuallyWith(t, 2*time.Minute, func() (bool, string) {
			m, ok, err := registryMove(metaAdmin, "app")
			return err == nil && ok && m.ID == uint64(i+1) && m.State == adminapi.MoveDone, fmt.Sprintf("%+v %v", m, err)
		}, "move %d (%s to %s) is driven to its end", i+1, hop.from, hop.to)

		if !held.Held() || held.Token() != tok {
			t.Fatalf("after move %d the holder lost its lock (held %v, token %d, was %d)", i+1, held.Held(), held.Token(), tok)
		}
		if err := held.Renew(ctx, time.Minute); err != nil {
			t.Fatalf("after move %d the holder cannot renew at %s: %v", i+1, hop.to, err)
		}
		for k := range 20 {
			tk := grant(fmt.Sprintf("after%d-%d", i, k))
			if tk <= maxTok {
				t.Fatalf("after move %d a grant's token %#x is not above %#x, granted before it", i+1, tk, maxTok)
			}
		}
		for k := range 20 {
			maxTok = max(maxTok, grant(fmt.Sprintf("after%d-%d", i, k)))
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
