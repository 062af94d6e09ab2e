package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// These tests are the holder's contract (client/doc.go, "The holder's
// contract") against real processes: when another client is granted a
// key, the previous holder's client already says it does not hold it —
// Held false, Lost closed, Context cancelled — after a renewal that
// shortened its TTL or a force-unlock, across a master that was paused.

// masterOf returns the node that serves key's group (namespace "e2e").
func (c *cluster) masterOf(key string) *proc {
	g := wire.GroupOf(wire.KeyHash("e2e", key), 15)
	var m *proc
	c.waitUntil("the key's group has a master", 30*time.Second, func() bool {
		for _, p := range c.procs {
			if slices.Contains(c.servedGroups(p), g) {
				m = p
				return true
			}
		}
		return false
	})
	return m
}

// pause stops p with SIGSTOP; the cleanup resumes it.
func (c *cluster) pause(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pause node %d: %v", p.id, err)
	}
	proc := p.cmd.Process
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
}

// grantedAfter takes key through b (blocking) and, the moment the grant
// returns, checks that a no longer believes it holds the key; it returns
// what it found wrong.
func grantedAfter(ctx context.Context, a *client.Mutex, b *client.Client, key string) error {
	lost := a.Lost()
	actx := a.Context()
	tokenA := a.Token()
	mb := b.Mutex(key, client.TTL(5*time.Second))
	if err := mb.Lock(ctx); err != nil {
		return fmt.Errorf("b's Lock: %w", err)
	}
	defer func() { _ = mb.Unlock(ctx) }()
	// B holds the key: A must already know it does not.
	if held, until := a.Held(), a.ValidUntil(); held {
		return fmt.Errorf("a still believes it holds %q (valid for %v more) while b was granted it with token %d", key, time.Until(until), mb.Token())
	}
	select {
	case <-lost:
	default:
		return errors.New("a's Lost is not closed although b holds the key")
	}
	if actx.Err() == nil {
		return errors.New("a's Context is not cancelled although b holds the key")
	}
	if mb.Token() <= tokenA {
		return fmt.Errorf("b's token %d is not above a's %d", mb.Token(), tokenA)
	}
	return nil
}

// holderSetup starts a 3-node cluster and two clients of it, all stopped
// when the test ends, and a context bounding the test (skipped without
// PAXLOCK_E2E).
func holderSetup(t *testing.T) (*cluster, context.Context, *client.Client, *client.Client) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the cross-process fault suite")
	}
	c := startCluster(t, 3)
	t.Cleanup(c.stopAll)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	ca, cb := c.newClient(ctx), c.newClient(ctx)
	t.Cleanup(func() {
		_ = ca.Close()
		_ = cb.Close()
	})
	return c, ctx, ca, cb
}

// TestHolderShortRenewAcrossPause: A holds with a 60 s TTL, renews with
// 2 s, and the master is paused; the next master expires A's hold 2 s
// after it takes over and grants B. A's client counted the 2 s from the
// renewal's send, so it stopped believing first.
func TestHolderShortRenewAcrossPause(t *testing.T) {
	c, ctx, ca, cb := holderSetup(t)
	const key = "short-renew"
	a := ca.Mutex(key, client.TTL(60*time.Second))
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	long := a.ValidUntil()
	if err := a.Renew(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if short := a.ValidUntil(); !short.Before(long) || time.Until(short) > 2*time.Second {
		t.Fatalf("after Renew(2s) A is valid for %v more (before: %v)", time.Until(short), time.Until(long))
	}
	c.pause(t, c.masterOf(key))
	if err := grantedAfter(ctx, a, cb, key); err != nil {
		t.Fatal(err)
	}
}

// TestHolderForceUnlockAcrossPause: A holds, the master is paused, and an
// operator force-unlocks the key at the next master. B, waiting, is
// granted only once A stopped believing: A acknowledged the revocation
// (AutoRenew: its next renewal at the new master is answered REVOKED), or
// A's validity ran out (no renewal: the new master cannot reach it and
// waits for the hold's deadline).
func TestHolderForceUnlockAcrossPause(t *testing.T) {
	c, ctx, ca, cb := holderSetup(t)
	for _, tc := range []struct {
		key  string
		opts []client.Option
	}{
		{"revoke-renewing", []client.Option{client.TTL(6 * time.Second), client.AutoRenew()}},
		{"revoke-silent", []client.Option{client.TTL(6 * time.Second)}},
	} {
		a := ca.Mutex(tc.key, tc.opts...)
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		m := c.masterOf(tc.key)
		c.pause(t, m)
		var other *proc
		for _, p := range c.procs {
			if p != m {
				other = p
				break
			}
		}
		done := make(chan error, 1)
		go func() { done <- grantedAfter(ctx, a, cb, tc.key) }()
		// The force-unlock, sent to a live node until the new master
		// has it (it redirects while the group has no master).
		c.waitUntil("the force-unlock is accepted", 60*time.Second, func() bool {
			return forceUnlock(t, other, "e2e", tc.key)
		})
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		c.waitUntil("every group served again", 30*time.Second, func() bool {
			n := 0
			for _, p := range c.procs {
				n += len(c.servedGroups(p))
			}
			return n == 15
		})
	}
}

// forceUnlock posts /locks/unlock for key to p's admin endpoint and
// reports whether the cluster took it (200, or 202: revoked, waiting for
// the holder).
func forceUnlock(t *testing.T, p *proc, ns, key string) bool {
	body, _ := json.Marshal(map[string]string{"namespace": ns, "key": key})
	cl := http.Client{Timeout: 15 * time.Second}
	resp, err := cl.Post("http://"+p.admin+"/locks/unlock", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Logf("force-unlock: %v", err)
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted
}
