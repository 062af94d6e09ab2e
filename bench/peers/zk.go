package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/paxlock/paxlock/bench/load"
)

// ZooKeeper: one ZooKeeper session (connection) per worker. Exclusive locks
// use go-zookeeper's lock recipe (protected ephemeral-sequential node under
// the lock's directory, the lowest sequence holds it, a waiter watches its
// predecessor), wrapped so a context can abandon the wait. Read-write locks
// follow the shared-lock recipe of ZooKeeper's documentation, implemented
// here with the same client, since go-zookeeper has none.

// zkRoot is the parent of every lock directory. Keys map to one flat level
// below it ("a/b/c" → /pxblocks/a.b.c), so the recipe creates at most one
// parent per lock.
const zkRoot = "/pxblocks"

var zkACL = zk.WorldACL(zk.PermAll)

type zkLocker struct {
	servers []string
	timeout time.Duration
}

// OpenZK checks that the ensemble at cfg.ZKServers serves, and makes the
// root node. Each worker's session gets the TTL as its session timeout,
// clamped to the server's default bounds (4s to 40s).
func OpenZK(ctx context.Context, cfg Config) (load.Locker, error) {
	z := &zkLocker{servers: cfg.ZKServers, timeout: min(max(cfg.TTL, 4*time.Second), 40*time.Second)}
	c, err := z.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("zookeeper at %v: %w (is it running? bench/scripts/peers.sh start zk)", cfg.ZKServers, err)
	}
	defer c.Close()
	if _, err := c.Create(zkRoot, nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return nil, fmt.Errorf("zookeeper: creating %s: %w", zkRoot, err)
	}
	return z, nil
}

// zkLogger sends go-zookeeper's log lines to slog at debug level.
type zkLogger struct{}

func (zkLogger) Printf(format string, args ...any) {
	slog.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// connect opens a session and waits until the server has accepted it.
func (z *zkLocker) connect(ctx context.Context) (*zk.Conn, error) {
	c, events, err := zk.Connect(z.servers, z.timeout, zk.WithLogger(zkLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c, nil
			}
			if ev.State == zk.StateAuthFailed || ev.State == zk.StateExpired {
				c.Close()
				return nil, fmt.Errorf("zookeeper: session %v", ev.State)
			}
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

func (z *zkLocker) Name() string    { return "zk" }
func (z *zkLocker) Display() string { return "ZooKeeper" }

func (z *zkLocker) Caps() load.Caps {
	return load.Caps{
		ReadWrite: true,
		Wait:      "server watch on the predecessor's node",
		Notes: []string{
			fmt.Sprintf("3 members; one session per worker (timeout %v); go-zookeeper lock recipe", z.timeout),
			"no per-lock TTL or renew: a lock lives as long as its session",
			"fresh keys: the recipe creates the lock's parent znode, which release deletes",
			"read-write: the shared-lock recipe from ZooKeeper's docs",
		},
	}
}

// Version asks a member with the "srvr" four-letter word (whitelisted by
// peers.sh).
func (z *zkLocker) Version(ctx context.Context) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", z.servers[0])
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Zookeeper version: "); ok {
			v, _, _ = strings.Cut(v, ",")
			v, _, _ = strings.Cut(v, "-") // drop the (unexpanded) git id Debian's build carries
			return v, nil
		}
	}
	return "", fmt.Errorf("zookeeper: no version in srvr reply (is srvr in 4lw.commands.whitelist?): %v", sc.Err())
}

func (z *zkLocker) NewSession(ctx context.Context, _ int) (load.Session, error) {
	c, err := z.connect(ctx)
	if err != nil {
		return nil, zkErr(ctx, err)
	}
	return &zkSession{c: c}, nil
}

func (z *zkLocker) Close() error { return nil }

type zkSession struct {
	c       *zk.Conn
	pending sync.WaitGroup // abandoned exclusive acquires still finishing
}

// zkHold is a held lock's state.
type zkHold struct {
	dir  string
	lock *zk.Lock // exclusive: the recipe's lock
	node string   // read-write: our own node
}

func zkDir(key string) string { return zkRoot + "/" + strings.ReplaceAll(key, "/", ".") }

func (s *zkSession) Acquire(ctx context.Context, req load.Request) (load.Lease, error) {
	dir := zkDir(req.Key)
	if req.Mode != load.Exclusive {
		node, seq, err := s.acquireRW(ctx, dir, req.Mode)
		if err != nil {
			return load.Lease{}, zkErr(ctx, err)
		}
		return load.Lease{Key: req.Key, Mode: req.Mode, Token: uint64(seq) + 1, Fresh: req.Fresh,
			Handle: &zkHold{dir: dir, node: node}}, nil
	}
	// The recipe's Lock blocks without a context: run it aside, and if ctx
	// ends first, let it finish in the background and unlock at once.
	l := zk.NewLock(s.c, dir, zkACL)
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return load.Lease{}, zkErr(ctx, err)
		}
		return load.Lease{Key: req.Key, Mode: req.Mode, Fresh: req.Fresh, Handle: &zkHold{dir: dir, lock: l}}, nil
	case <-ctx.Done():
		s.pending.Add(1)
		go func() {
			defer s.pending.Done()
			if err := <-done; err == nil {
				_ = l.Unlock()
			}
		}()
		return load.Lease{}, ctx.Err()
	}
}

func (s *zkSession) Renew(context.Context, load.Lease, time.Duration) error {
	return load.ErrUnsupported
}

func (s *zkSession) Release(ctx context.Context, l load.Lease) error {
	h := l.Handle.(*zkHold)
	var err error
	if h.lock != nil {
		err = h.lock.Unlock()
	} else {
		err = s.c.Delete(h.node, -1)
	}
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zookeeper: %w: lock node is gone", load.ErrNotHeld)
	}
	if err != nil {
		return zkErr(ctx, err)
	}
	if l.Fresh {
		// Nobody else will use this key: remove its directory too.
		if err := s.c.Delete(h.dir, -1); err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
			return zkErr(ctx, err)
		}
	}
	return nil
}

// Close ends the session; the server deletes its ephemeral nodes, which
// also ends any abandoned acquire still waiting.
func (s *zkSession) Close(ctx context.Context) error {
	s.c.Close()
	done := make(chan struct{})
	go func() { s.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// acquireRW takes the read or write side of the read-write lock in dir:
// create an ephemeral sequential "read-" or "write-" node; a reader waits
// for the nearest lower "write-" node to go away, a writer for the nearest
// lower node of either kind; re-check after each deletion. On ctx's end the
// node is deleted, so an abandoned waiter leaves nothing behind.
func (s *zkSession) acquireRW(ctx context.Context, dir string, mode load.Mode) (string, int, error) {
	kind := "write-"
	if mode == load.Read {
		kind = "read-"
	}
	var node string
	var err error
	for range 3 {
		node, err = s.c.CreateProtectedEphemeralSequential(dir+"/"+kind, nil, zkACL)
		if !errors.Is(err, zk.ErrNoNode) {
			break
		}
		if _, err = s.c.Create(dir, nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return "", 0, err
		}
	}
	if err != nil {
		return "", 0, err
	}
	mySeq, err := zkSeq(node)
	if err != nil {
		return "", 0, err
	}
	for {
		children, _, err := s.c.Children(dir)
		if err != nil {
			_ = s.c.Delete(node, -1)
			return "", 0, err
		}
		pred, predSeq := "", -1
		for _, ch := range children {
			seq, err := zkSeq(ch)
			if err != nil || seq >= mySeq {
				continue
			}
			if mode == load.Read && !strings.Contains(ch, "write-") {
				continue // readers only wait for writers
			}
			if seq > predSeq {
				pred, predSeq = ch, seq
			}
		}
		if pred == "" {
			return node, mySeq, nil
		}
		exists, _, ev, err := s.c.ExistsW(dir + "/" + pred)
		if err != nil {
			_ = s.c.Delete(node, -1)
			return "", 0, err
		}
		if !exists {
			continue
		}
		select {
		case e := <-ev:
			if e.Err != nil {
				_ = s.c.Delete(node, -1)
				return "", 0, e.Err
			}
		case <-ctx.Done():
			_ = s.c.Delete(node, -1)
			return "", 0, ctx.Err()
		}
	}
}

// zkSeq parses the 10-digit sequence suffix ZooKeeper appends.
func zkSeq(name string) (int, error) {
	if len(name) < 10 {
		return 0, fmt.Errorf("zookeeper: no sequence in %q", name)
	}
	return strconv.Atoi(name[len(name)-10:])
}

// zkErr maps go-zookeeper's errors onto the harness's kinds.
func zkErr(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("zookeeper: %w (%v)", ctx.Err(), err)
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrSessionMoved), errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("zookeeper: %w: %v", load.ErrUnavailable, err)
	}
	return fmt.Errorf("zookeeper: %w", err)
}
