package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// TestForceUnlock: POST /locks/unlock to a node that does not serve the
// key's group is redirected to the one that does, which removes the hold
// of a holder that keeps renewing: the holder's Lost closes and another
// client takes the lock at once. On a semaphore it removes every hold,
// and a waiter for all the permits is granted.
func TestForceUnlock(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newClient(t, tc), newClient(t, tc)
	const key = "stuck"
	m := a.Mutex(key, client.TTL(time.Hour), client.AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	g := wire.GroupOf(wire.KeyHash("ns", key), len(tc.nodes[0].svc.Groups()))
	var other *Server
	waitFor(t, "a node that does not serve the key's group", func() bool {
		for _, s := range tc.nodes {
			if s.svc.Group(group.ID(g)).Serving() {
				continue
			}
			// Its view names another node as the master (a view that
			// still names itself, the master a moment ago, would be
			// answered 503, not redirected).
			if v := s.view.Load(); g < len(v.Groups) && v.Groups[g].Master != 0 && v.Groups[g].Master != s.cfg.NodeID {
				other = s
				return true
			}
		}
		return false
	})
	body, _ := json.Marshal(map[string]string{"namespace": "ns", "key": key})
	var out adminapi.ForceUnlocked
	// 503: the key's group between masters on a loaded machine; sent
	// again as paxlockctl does. The refused attempt's revocation may still
	// be chosen by the next master, and then the retry finds the key free.
	refused := false
	waitFor(t, "the force-unlock to be served", func() bool {
		resp, err := http.Post("http://"+other.cfg.self().Admin+"/locks/unlock", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			refused = true
			return false
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("force unlock: HTTP %d, %+v, %v", resp.StatusCode, out, err)
		}
		return true
	})
	revokedEarlier := refused && len(out.Released) == 0
	if !revokedEarlier && (len(out.Released) != 1 || out.Released[0].Token != m.Token() || out.Released[0].Client != m.Owner().Client) {
		t.Fatalf("released %+v, want the hold with token %d", out.Released, m.Token())
	}
	// The master frees a revoked key only once its holder acknowledged:
	// by the time the force unlock answers, the holder knows.
	if m.Held() {
		t.Fatal("the holder still believes it holds the lock after the force unlock answered")
	}
	select {
	case <-m.Lost():
	case <-ctx.Done():
		t.Fatal("the holder's Lost did not close after the force unlock")
	}
	if err := b.Mutex(key).TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the force unlock: %v", err)
	}
	// Bad input is refused and changes nothing.
	if code := adminDo(t, http.MethodPost, "http://"+other.cfg.self().Admin+"/locks/unlock", map[string]string{"namespace": "nope", "key": key}); code != http.StatusNotFound {
		t.Fatalf("unknown namespace: HTTP %d", code)
	}
	if code := adminDo(t, http.MethodGet, "http://"+other.cfg.self().Admin+"/locks/unlock", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: HTTP %d", code)
	}

	// A semaphore: every hold goes (each holder's Lost closes), and the
	// waiter that wants every permit is granted at once.
	const sem = "pool"
	h1 := a.Semaphore(sem, 3, client.TTL(time.Hour), client.AutoRenew())
	h2 := b.Semaphore(sem, 3, client.TTL(time.Hour), client.AutoRenew())
	if err := h1.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := h2.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, tc)
	all := c.Semaphore(sem, 3, client.TTL(time.Hour))
	granted := make(chan error, 1)
	go func() { granted <- all.Acquire(ctx, 3) }()
	waitFor(t, "the waiter for 3 permits queued", func() bool {
		st, err := c.State(ctx, sem)
		return err == nil && st.QueueLen == 1
	})
	body, _ = json.Marshal(map[string]string{"namespace": "ns", "key": sem})
	resp2, err := http.Post("http://"+other.cfg.self().Admin+"/locks/unlock", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var out2 adminapi.ForceUnlocked
	if err := json.NewDecoder(resp2.Body).Decode(&out2); err != nil || resp2.StatusCode != http.StatusOK {
		t.Fatalf("force unlock of the semaphore: HTTP %d, %+v, %v", resp2.StatusCode, out2, err)
	}
	if len(out2.Released) != 2 {
		t.Fatalf("released %+v, want the two semaphore holds", out2.Released)
	}
	for i, h := range []*client.Semaphore{h1, h2} {
		select {
		case <-h.Lost():
		case <-ctx.Done():
			t.Fatalf("semaphore holder %d: Lost did not close after the force unlock", i+1)
		}
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter for every permit after the force unlock: %v", err)
	}
	if all.Token() <= h2.Token() || all.Held() != 3 {
		t.Fatalf("waiter holds %d permits with token %d (earlier holds' tokens %d, %d)", all.Held(), all.Token(), h1.Token(), h2.Token())
	}
}
