package peers

// The paxlock adapter: paxlock's own Go client (package
// github.com/paxlock/paxlock/client, from the enclosing repository through
// go.mod's replace directive), used as an application would use it. This is
// the only file of bench/ that imports the client.
//
//   - One client.Client for all workers: it keeps one multiplexed,
//     pipelined connection per node and routes each key to its group's
//     master, so a session is only a pointer to it.
//   - Every acquire makes a new handle (Client.Mutex or Client.RWMutex),
//     which sends nothing by itself. A handle is its lock's owner, so
//     workers never share one, and fresh keys need a new handle anyway.
//   - Acquire is Lock with the harness's context deadline: a taken key is
//     waited for in the master's queue, and the worker is woken by the
//     server's Granted push (the client tells the server the deadline as
//     the wait's MaxWaitMs). The lease carries the handle and its fencing
//     token (Mutex.Token).
//   - Renew is Mutex.Renew; Release is Mutex.Unlock, which sends the
//     handle's token. No AutoRenew: the harness renews explicitly.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/client"
)

type paxlockLocker struct {
	c   *client.Client
	tls bool // through the nodes' TLS client listeners
	lq  bool // Config.LocalQueue
}

// OpenPaxlock connects one client to the paxlock cluster reachable through
// cfg.PaxlockRegistry and checks that a lock can be taken and released.
func OpenPaxlock(ctx context.Context, cfg Config) (load.Locker, error) {
	return openPaxlock(ctx, cfg, cfg.PaxlockRegistry, nil, false)
}

// OpenPaxlockLocalQueue is OpenPaxlock with the client's local queueing
// on (client.Config.LocalQueue): the workers waiting for a key wait in
// the client, one of them on the server, and an unlock hands the key on
// to the next in its Release's command. System "paxlock-lq", to measure
// what local queueing changes in one run.
func OpenPaxlockLocalQueue(ctx context.Context, cfg Config) (load.Locker, error) {
	return openPaxlock(ctx, cfg, cfg.PaxlockRegistry, nil, true)
}

// OpenPaxlockTLS is OpenPaxlock through the nodes' TLS client listeners
// (cfg.PaxlockTLSRegistry), verifying them against cfg.PaxlockCA: the same
// cluster measured with TLS between client and nodes, to show what it
// costs.
func OpenPaxlockTLS(ctx context.Context, cfg Config) (load.Locker, error) {
	pem, err := os.ReadFile(cfg.PaxlockCA)
	if err != nil {
		return nil, fmt.Errorf("paxlock-tls: the cluster's CA: %w (a secure bench/scripts/paxlock.sh cluster writes it)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("paxlock-tls: no certificate in %s", cfg.PaxlockCA)
	}
	return openPaxlock(ctx, cfg, cfg.PaxlockTLSRegistry, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, false)
}

func openPaxlock(ctx context.Context, cfg Config, registry []string, tc *tls.Config, lq bool) (load.Locker, error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.New(octx, client.Config{
		Registry:  registry,
		Namespace: cfg.PaxlockNamespace,
		Secret:    cfg.PaxlockSecret,
		TLS:       tc,

		LocalQueue: lq,
	})
	if err != nil {
		return nil, fmt.Errorf("paxlock at %v, namespace %q: %w (is it running? bench/scripts/paxlock.sh start)",
			registry, cfg.PaxlockNamespace, err)
	}
	// The view names a master for every group only once elections settled;
	// a throw-away lock proves the key's group serves.
	m := c.Mutex(fmt.Sprintf("pxb/ping/%d", time.Now().UnixNano()), client.TTL(5*time.Second))
	if err := m.TryLock(octx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("paxlock at %v: test lock: %w", registry, paxlockErr(octx, err))
	}
	if err := m.Unlock(octx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("paxlock at %v: test unlock: %w", registry, paxlockErr(octx, err))
	}
	return &paxlockLocker{c: c, tls: tc != nil, lq: lq}, nil
}

func (p *paxlockLocker) Name() string {
	switch {
	case p.tls:
		return "paxlock-tls"
	case p.lq:
		return "paxlock-lq"
	}
	return "paxlock"
}

func (p *paxlockLocker) Display() string {
	switch {
	case p.tls:
		return "paxlock (TLS clients)"
	case p.lq:
		return "paxlock (local queue)"
	}
	return "paxlock"
}

func (p *paxlockLocker) Caps() load.Caps {
	groups, nodes := 0, 0
	if v := p.c.View(); v != nil {
		groups, nodes = len(v.Groups), len(v.Nodes)
	}
	return load.Caps{
		Renew:     true,
		ReadWrite: true,
		Fencing:   true,
		Wait:      map[bool]string{true: "server-side queue, push; a client's own waiters queue locally", false: "server-side queue, push"}[p.lq],
		// A free key's acquire, a release and a renew each commit one
		// command of the key's Paxos group.
		CommandsPerLock:  2,
		CommandsPerRenew: 1,
		Notes: []string{
			fmt.Sprintf("%d nodes, %d Paxos groups, fsync on every accept (Pebble)", nodes, groups),
			"each node's GOMAXPROCS is its share of the cores (cores/3, at least 1), as scripts/cluster.sh starts them",
			"one client.Client shared by all workers (one multiplexed connection per node" + map[bool]string{true: ", TLS 1.3 to the nodes' client_tls_addr", false: ", plain TCP"}[p.tls] + ")",
			"a new Mutex/RWMutex handle per acquire; acquire = Lock with the deadline; release = Unlock with the token",
		},
	}
}

// Version reports the build the cluster runs. The protocol carries no
// server version, so it is the repository's `git describe` (the bench
// builds the servers from the same tree), or "dev".
func (p *paxlockLocker) Version(context.Context) (string, error) {
	return repoVersion(), nil
}

var (
	versionOnce sync.Once
	version     string
)

func repoVersion() string {
	versionOnce.Do(func() {
		version = "dev"
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return
		}
		// bench/peers/paxlock.go → the repository root.
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
		if err != nil {
			return
		}
		if v := strings.TrimSpace(string(out)); v != "" {
			version = v
		}
	})
	return version
}

func (p *paxlockLocker) NewSession(context.Context, int) (load.Session, error) {
	return &paxlockSession{c: p.c}, nil
}

func (p *paxlockLocker) Close() error { return p.c.Close() }

type paxlockSession struct {
	c *client.Client
}

func (s *paxlockSession) Acquire(ctx context.Context, req load.Request) (load.Lease, error) {
	var m *client.Mutex
	switch req.Mode {
	case load.Exclusive:
		m = s.c.Mutex(req.Key, client.TTL(req.TTL))
	case load.Write:
		m = s.c.RWMutex(req.Key, client.TTL(req.TTL)).Writer()
	case load.Read:
		m = s.c.RWMutex(req.Key, client.TTL(req.TTL)).Reader()
	default:
		return load.Lease{}, load.ErrUnsupported
	}
	if err := m.Lock(ctx); err != nil {
		return load.Lease{}, paxlockErr(ctx, err)
	}
	return load.Lease{Key: req.Key, Mode: req.Mode, Token: m.Token(), Fresh: req.Fresh, Handle: m}, nil
}

func (s *paxlockSession) Renew(ctx context.Context, l load.Lease, ttl time.Duration) error {
	m := l.Handle.(*client.Mutex) // the exclusive handle, or the RWMutex side taken
	if err := m.Renew(ctx, ttl); err != nil {
		return paxlockErr(ctx, err)
	}
	return nil
}

func (s *paxlockSession) Release(ctx context.Context, l load.Lease) error {
	m := l.Handle.(*client.Mutex)
	if err := m.Unlock(ctx); err != nil {
		return paxlockErr(ctx, err)
	}
	return nil
}

func (s *paxlockSession) Close(context.Context) error { return nil }

// paxlockErr maps the client's sentinels onto the harness's kinds and keeps
// context errors recognizable.
func paxlockErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("paxlock: %w", err)
	case ctx.Err() != nil:
		return fmt.Errorf("paxlock: %w (%v)", ctx.Err(), err)
	case errors.Is(err, client.ErrLockLost), errors.Is(err, client.ErrNotHeld):
		return fmt.Errorf("paxlock: %w: %v", load.ErrNotHeld, err)
	case errors.Is(err, client.ErrTimeout):
		return fmt.Errorf("paxlock: %w: %v", context.DeadlineExceeded, err)
	case errors.Is(err, client.ErrOverloaded), errors.Is(err, client.ErrNoMaster),
		errors.Is(err, client.ErrUnavailable):
		return fmt.Errorf("paxlock: %w: %v", load.ErrUnavailable, err)
	}
	return fmt.Errorf("paxlock: %w", err)
}
