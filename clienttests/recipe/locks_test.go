package recipe_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
	"github.com/paxlock/paxlock/paxlocktest"
	"github.com/paxlock/paxlock/server"
)

func TestRecipeReentrantMutex(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	c := cl.Client(t)
	m := recipe.NewMutex(c, "nr:a")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var re *recipe.ReentrantError
	if err := m.Lock(ctx); !errors.As(err, &re) || !errors.Is(err, recipe.ErrReentrant) || re.Key != "nr:a" {
		t.Fatalf("second Lock = %v, want a *ReentrantError for nr:a", err)
	}
	if err := m.TryLock(ctx); !errors.Is(err, recipe.ErrReentrant) {
		t.Fatalf("TryLock while held = %v, want ErrReentrant", err)
	}
	// Another holder is not refused as reentrant: it contends.
	if err := recipe.NewMutex(c, "nr:a").TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("another handle's TryLock = %v, want ErrLocked", err)
	}
	stopMaster(t, cl, "nr:a")
	if err := m.Lock(ctx); !errors.Is(err, recipe.ErrReentrant) {
		t.Fatalf("second Lock after a master change = %v, want ErrReentrant", err)
	}
	if err := retry(ctx, func() error { return m.Unlock(ctx) }); err != nil {
		t.Fatalf("Unlock across the master change: %v", err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	if err := retry(ctx, func() error { return m.Lock(ctx) }); err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRecipeReentrantProcessMutex(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	c := cl.Client(t)
	a, b := recipe.NewProcessMutex(c, "nr:p"), recipe.NewProcessMutex(c, "nr:p")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx); !errors.Is(err, recipe.ErrReentrant) {
		t.Fatalf("Lock through another ProcessMutex of the same client = %v, want ErrReentrant", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx); err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRecipeUpgradable(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	u := recipe.NewUpgradableRWMutex(cl.Client(t), "up:a")
	reader := recipe.NewUpgradableRWMutex(cl.Client(t), "up:a")
	rival := recipe.NewUpgradableRWMutex(cl.Client(t), "up:a")
	if err := u.UpgradableRLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reader.RLock(ctx); err != nil {
		t.Fatalf("a plain reader beside the upgradable reader: %v", err)
	}
	expectBlocked(t, "a second upgradable reader", rival.UpgradableRLock)
	expectBlocked(t, "a writer while the upgradable reader holds", rival.Lock)
	readToken := u.Token()
	// The upgrade waits for the plain reader to leave.
	upgraded := make(chan error, 1)
	go func() { upgraded <- u.Upgrade(ctx) }()
	stopMaster(t, cl, "up:a")
	if err := retry(ctx, func() error { return reader.RUnlock(ctx) }); err != nil {
		t.Fatalf("RUnlock: %v", err)
	}
	if err := <-upgraded; err != nil {
		if err = retry(ctx, func() error { return u.Upgrade(ctx) }); err != nil {
			t.Fatalf("Upgrade across the master change: %v", err)
		}
	}
	if tok := u.Token(); tok <= readToken {
		t.Fatalf("write token %d not above the read's %d", tok, readToken)
	}
	expectBlocked(t, "a plain reader beside the upgraded writer", reader.RLock)
	if err := retry(ctx, func() error { return u.Downgrade(ctx) }); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	if err := reader.RLock(ctx); err != nil {
		t.Fatalf("a plain reader after the downgrade: %v", err)
	}
	expectBlocked(t, "a second upgradable reader after the downgrade", rival.UpgradableRLock)
	if err := reader.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := u.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rival.UpgradableRLock(ctx); err != nil {
		t.Fatalf("the next upgradable reader: %v", err)
	}
	if err := rival.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Two readers that both upgrade finish, one after the other: no deadlock.
func TestRecipeUpgradableTwoUpgraders(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	ctx := testCtx(t)
	errs := make(chan error, 2)
	var writing atomic.Int32
	for range 2 {
		u := recipe.NewUpgradableRWMutex(cl.Client(t), "up:two")
		go func() {
			errs <- func() error {
				if err := u.UpgradableRLock(ctx); err != nil {
					return err
				}
				if err := u.Upgrade(ctx); err != nil {
					return err
				}
				if w := writing.Add(1); w != 1 {
					return fmt.Errorf("%d writers at once", w)
				}
				writing.Add(-1)
				return u.Unlock(ctx)
			}()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecipeUpgradableModes(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 1)
	ctx := testCtx(t)
	u := recipe.NewUpgradableRWMutex(cl.Client(t), "up:modes")
	if err := u.Upgrade(ctx); !errors.Is(err, recipe.ErrInvalid) {
		t.Fatalf("Upgrade without the upgradable read = %v, want ErrInvalid", err)
	}
	if err := u.Unlock(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Unlock of nothing = %v, want ErrNotHeld", err)
	}
	if err := u.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := u.Upgrade(ctx); !errors.Is(err, recipe.ErrInvalid) {
		t.Fatalf("Upgrade of a plain read = %v, want ErrInvalid", err)
	}
	if err := u.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRecipeUpgradableLost: Held and Lost follow the holds of the
// handle's mode: held after UpgradableRLock, and when an operator
// force-unlocks the gate, Lost closes and Held turns false; a Lost of
// holds that are released instead stays open; a handle holding nothing
// has a closed Lost.
func TestRecipeUpgradableLost(t *testing.T) {
	t.Parallel()
	var admins []string
	cl := newCluster(t, 3, paxlocktest.Options{Tune: func(c *server.Config) { admins = append(admins, c.AdminAddr) }})
	ctx := testCtx(t)
	u := recipe.NewUpgradableRWMutex(cl.Client(t), "up:lost")
	select {
	case <-u.Lost():
	default:
		t.Fatal("Lost of a handle that holds nothing is open")
	}
	if err := u.UpgradableRLock(ctx); err != nil {
		t.Fatal(err)
	}
	kept := u.Lost()
	if err := u.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := u.UpgradableRLock(ctx); err != nil {
		t.Fatal(err)
	}
	lost := u.Lost()
	if !u.Held() {
		t.Fatal("Held after UpgradableRLock is false")
	}
	body, _ := json.Marshal(map[string]string{"namespace": paxlocktest.DefaultNamespace, "key": "up:lost/upgrade"})
	if err := retry(ctx, func() error {
		resp, err := http.Post("http://"+admins[0]+"/locks/unlock", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("force-unlock: %s: %w", resp.Status, client.ErrUnavailable)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("Lost did not close when the gate was force-unlocked")
	}
	if u.Held() {
		t.Fatal("Held after the gate's loss is true")
	}
	select {
	case <-kept:
		t.Fatal("the Lost of holds that were released closed")
	default:
	}
	_ = u.Unlock(ctx) // the read is still held: give it back
}
