package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/wire"
)

// TestForceUnlock: POST /locks/unlock to a node that does not serve the
// key's group is redirected to the one that does, which removes the hold
// of a holder that keeps renewing: the holder's Lost closes and another
// client takes the lock at once.
func TestForceUnlock(t *testing.T) {
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
			if s.svc.Group(g).Serving() {
				continue
			}
			if v := s.view.Load(); g < len(v.Groups) && v.Groups[g].Master != 0 {
				other = s
				return true
			}
		}
		return false
	})
	body, _ := json.Marshal(map[string]string{"namespace": "ns", "key": key})
	resp, err := http.Post("http://"+other.cfg.self().Admin+"/locks/unlock", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out ForceUnlocked
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("force unlock: HTTP %d, %+v, %v", resp.StatusCode, out, err)
	}
	if len(out.Released) != 1 || out.Released[0].Token != m.Token() || out.Released[0].Client != m.Owner().Client {
		t.Fatalf("released %+v, want the hold with token %d", out.Released, m.Token())
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
}
