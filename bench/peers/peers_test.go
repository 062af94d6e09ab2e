package peers_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/peers"
)

// These tests drive the real servers of bench/scripts/peers.sh through each
// adapter, briefly. A server that is not running is skipped, so `go test
// ./...` passes on a machine without them.

func openOrSkip(t *testing.T, name string) load.Locker {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no servers")
	}
	cfg := peers.DefaultConfig()
	cfg.MaxWorkers = 4
	// paxlock-api speaks TLS to a secure make run cluster (its CA under
	// the repository's .run/), h2c to a plaintext one.
	cfg.PaxlockCA = os.Getenv("PAXLOCK_CA")
	if cfg.PaxlockCA == "" {
		cfg.PaxlockCA = filepath.Join("..", "..", ".run", "certs", "ca.crt")
	}
	// Fail fast where nothing listens, instead of waiting out the clients' timeouts.
	addr := map[string]string{
		"redis":       cfg.RedisAddr,
		"redis-aof":   cfg.RedisAOFAddr,
		"etcd":        strings.TrimPrefix(cfg.EtcdEndpoints[0], "http://"),
		"zk":          cfg.ZKServers[0],
		"paxlock":     cfg.PaxlockRegistry[0],
		"paxlock-api": cfg.PaxlockAPI[0],
	}[name]
	if addr != "" {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Skipf("%s is not running (bench/scripts/peers.sh start %s): %v", name, name, err)
		}
		_ = c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lk, err := peers.Open(ctx, name, cfg)
	if errors.Is(err, load.ErrNotBuilt) {
		t.Skipf("%s: %v", name, err)
	}
	if err != nil {
		t.Skipf("%s is not reachable (bench/scripts/peers.sh start %s): %v", name, name, err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

func TestAdaptersAgainstServers(t *testing.T) {
	for _, name := range []string{"paxlock", "paxlock-api", "redis", "redis-aof", "etcd", "zk"} {
		t.Run(name, func(t *testing.T) {
			lk := openOrSkip(t, name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if v, err := lk.Version(ctx); err != nil || v == "" {
				t.Errorf("version %q, err %v", v, err)
			}
			for _, kind := range load.Kinds {
				sc := load.Scenario{
					Name: string(kind), Kind: kind, Workers: 4, Warmup: 100 * time.Millisecond,
					Duration: time.Second, TTL: 10 * time.Second, AcquireTimeout: 20 * time.Second,
					Keys: 2, Renews: 2, ReadFraction: 0.7, Seed: 7,
				}
				if ok, _ := sc.Supported(lk.Caps()); !ok {
					continue
				}
				res, err := load.Run(ctx, lk, sc, nil)
				if err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				if res.Ops == 0 {
					// A starved machine can make a short window empty; that
					// is slowness, not a failure (errors are checked below).
					t.Logf("%s: no op completed in the window", kind)
				}
				if len(res.Errors) > 0 {
					t.Errorf("%s: errors %v (%v)", kind, res.Errors, res.ErrorSamples)
				}
				if res.Overlaps != 0 || res.TokenRegressions != 0 {
					t.Errorf("%s: %d overlaps, %d token regressions", kind, res.Overlaps, res.TokenRegressions)
				}
			}
		})
	}
}

// A waiter whose context ends must give up promptly and leave the lock
// usable for others.
func TestAcquireHonoursContext(t *testing.T) {
	for _, name := range []string{"paxlock", "paxlock-api", "redis", "etcd", "zk"} {
		t.Run(name, func(t *testing.T) {
			lk := openOrSkip(t, name)
			ctx := context.Background()
			a, err := lk.NewSession(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(ctx)
			b, err := lk.NewSession(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctx)
			req := load.Request{Key: "pxb/test/ctx-" + time.Now().Format("150405.000000"), TTL: 10 * time.Second}
			held, err := a.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			start := time.Now()
			_, err = b.Acquire(wctx, req)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("second acquire: err %v, want deadline exceeded", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("gave up after %v", d)
			}
			if err := a.Release(ctx, held); err != nil {
				t.Fatal(err)
			}
			// The abandoned waiter must not block the key.
			c, err := lk.NewSession(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := c.Acquire(actx, req)
			if err != nil {
				t.Fatalf("acquire after the abandoned wait: %v", err)
			}
			if err := c.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpenUnknownSystem(t *testing.T) {
	if _, err := peers.Open(context.Background(), "consul", peers.DefaultConfig()); err == nil {
		t.Fatal("no error for an unknown system")
	}
}
