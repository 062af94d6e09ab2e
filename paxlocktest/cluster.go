// Package paxlocktest starts a real paxlock cluster inside a test
// process, for a user's own go test: real nodes (Pebble on temporary
// directories, the binary protocol on free loopback ports, Paxos between
// them), ready in about a second, with fault hooks to stop, restart and
// isolate a node.
//
//	func TestWorker(t *testing.T) {
//		cluster := paxlocktest.NewCluster(t, 3)
//		c := cluster.Client(t)
//		m := c.Mutex("job-42")
//		...
//		cluster.Isolate(cluster.MasterOf("job-42")) // the holder must see Lost
//	}
//
// The nodes run with short leases (500 ms) and heartbeats so that a
// master's loss is noticed in about a second, and without TLS (the peers
// relay with a shared secret); everything else is the node's production
// code and defaults. A Cluster is for tests: it listens on 127.0.0.1 only
// and removes its data when closed.
package paxlocktest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/freeport"
	"github.com/paxlock/paxlock/server"
)

// Default namespace and secret of a Cluster's clients.
const (
	DefaultNamespace = "test"
	DefaultSecret    = "paxlocktest-secret"
)

// ErrNoNode is returned for a node number outside 1..Size.
var ErrNoNode = errors.New("paxlocktest: no such node")

// Options tune a Cluster; the zero value is a working one.
type Options struct {
	// Namespace and Secret are the namespace the cluster is seeded with
	// and its secret (DefaultNamespace, DefaultSecret when empty).
	Namespace, Secret string
	// Logger receives the nodes' logs (discarded when nil).
	Logger *slog.Logger
	// StartTimeout bounds the start (default 60 s: a loaded CI machine).
	StartTimeout time.Duration
	// Tune, if set, changes each node's configuration before it starts.
	Tune func(*server.Config)
}

// Cluster is a running test cluster of n nodes, numbered 1..n.
type Cluster struct {
	opts  Options
	dir   string
	cfgs  []server.Config
	mu    sync.Mutex
	nodes []*server.Server // nil while stopped
}

// NewCluster starts an n-node cluster for the test and stops it when the
// test ends; it fails the test if the cluster cannot start.
func NewCluster(t testing.TB, n int, opts ...Options) *Cluster {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	c, err := New(context.Background(), n, o)
	if err != nil {
		t.Fatalf("paxlocktest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("paxlocktest: close: %v", err)
		}
	})
	return c
}

// New starts an n-node cluster and waits until every lock group has a
// master: for a TestMain or an example, where there is no testing.TB.
// Close stops it.
func New(ctx context.Context, n int, o Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("paxlocktest: %d nodes, want at least 1", n)
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Secret == "" {
		o.Secret = DefaultSecret
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	dir, err := os.MkdirTemp("", "paxlocktest-")
	if err != nil {
		return nil, fmt.Errorf("paxlocktest: %w", err)
	}
	c := &Cluster{opts: o, dir: dir, nodes: make([]*server.Server, n)}
	if err := c.configure(n); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	for i := 1; i <= n; i++ {
		if err := c.start(ctx, i); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	for i := 1; i <= n; i++ {
		if err := c.node(i).WaitReady(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("paxlocktest: node %d not ready: %w", i, err)
		}
	}
	return c, nil
}

// configure writes the nodes' configurations: three free loopback ports
// each, a shared relay secret, the test timings.
func (c *Cluster) configure(n int) error {
	ports, err := freeport.Loopback(3 * n)
	if err != nil {
		return err
	}
	relay := filepath.Join(c.dir, "relay.secret")
	if err := os.WriteFile(relay, []byte("paxlocktest-relay-secret\n"), 0o600); err != nil {
		return fmt.Errorf("paxlocktest: %w", err)
	}
	var nodes []server.NodeAddr
	for i := range n {
		nodes = append(nodes, server.NodeAddr{ID: uint32(i + 1), Peer: ports[3*i], Client: ports[3*i+1], Admin: ports[3*i+2]})
	}
	for i := range n {
		cfg := server.Config{
			NodeID:          uint32(i + 1),
			Nodes:           nodes,
			AdminAddr:       nodes[i].Admin,
			DataDir:         filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
			Namespaces:      []server.Namespace{{Name: c.opts.Namespace, Secret: c.opts.Secret}},
			EventLoops:      1,
			ClientListener:  server.ListenerNetpoll,
			Lease:           server.Duration(500 * time.Millisecond),
			Heartbeat:       server.Duration(50 * time.Millisecond),
			RelaySecretFile: relay,
			FaultInjection:  true,
			// A node shutting down hands its groups to peers first; the
			// last node of a closing cluster has none to wait for.
			DrainTimeout: server.Duration(time.Second),
		}
		if c.opts.Tune != nil {
			c.opts.Tune(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	return nil
}

// start starts node i (1-based) on its configuration; a port still held
// by the node it replaces is tried again until ctx ends.
func (c *Cluster) start(ctx context.Context, i int) error {
	for {
		s, err := server.New(c.cfgs[i-1], c.opts.Logger.With("node", i))
		if err == nil {
			if err = s.Start(ctx); err == nil {
				c.mu.Lock()
				c.nodes[i-1] = s
				c.mu.Unlock()
				return nil
			}
			_ = s.Shutdown(context.Background())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("paxlocktest: start node %d: %w (last: %w)", i, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) node(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i-1]
}

// Size is the number of nodes, stopped ones included.
func (c *Cluster) Size() int { return len(c.cfgs) }

// Registry is every node's client address, for client.Config.Registry.
func (c *Cluster) Registry() []string {
	var out []string
	for _, n := range c.cfgs[0].Nodes {
		out = append(out, n.Client)
	}
	return out
}

// ClientConfig is a client configuration for the cluster's namespace.
func (c *Cluster) ClientConfig() client.Config {
	return client.Config{Registry: c.Registry(), Namespace: c.opts.Namespace, Secret: c.opts.Secret}
}

// NewClient connects a client to the cluster's namespace; the caller
// closes it.
func (c *Cluster) NewClient(ctx context.Context) (*client.Client, error) {
	return client.New(ctx, c.ClientConfig())
}

// Client connects a client for the test, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.NewClient(ctx)
	if err != nil {
		t.Fatalf("paxlocktest: client: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// StopNode shuts node i down (its data stays, for RestartNode). The other
// nodes elect new masters for the groups it mastered after its lease.
func (c *Cluster) StopNode(i int) error {
	if i < 1 || i > c.Size() {
		return fmt.Errorf("%w: %d", ErrNoNode, i)
	}
	c.mu.Lock()
	s := c.nodes[i-1]
	c.nodes[i-1] = nil
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}

// RestartNode starts a stopped node i again on its data; it returns once
// the node listens.
func (c *Cluster) RestartNode(ctx context.Context, i int) error {
	if i < 1 || i > c.Size() {
		return fmt.Errorf("%w: %d", ErrNoNode, i)
	}
	if c.node(i) != nil {
		return fmt.Errorf("paxlocktest: node %d is running", i)
	}
	return c.start(ctx, i)
}

// Isolate cuts node i off from every other node (Paxos traffic both
// ways) while its clients still reach it: a master cut off stops granting
// once its lease runs out, and the others elect new masters. Heal undoes
// it.
func (c *Cluster) Isolate(i int) error {
	s, err := c.running(i)
	if err != nil {
		return err
	}
	var others []uint32
	for _, n := range c.cfgs[0].Nodes {
		if n.ID != uint32(i) {
			others = append(others, n.ID)
		}
	}
	return s.CutPeers(others...)
}

// Heal reconnects node i to the others.
func (c *Cluster) Heal(i int) error {
	s, err := c.running(i)
	if err != nil {
		return err
	}
	return s.CutPeers()
}

func (c *Cluster) running(i int) (*server.Server, error) {
	if i < 1 || i > c.Size() {
		return nil, fmt.Errorf("%w: %d", ErrNoNode, i)
	}
	s := c.node(i)
	if s == nil {
		return nil, fmt.Errorf("paxlocktest: node %d is stopped", i)
	}
	return s, nil
}

// MasterOf is the node that masters the lock group of key in the
// cluster's namespace: of the running nodes' views, the one with the
// group's highest epoch (an isolated node's own view lags), 0 while no
// node knows a master.
func (c *Cluster) MasterOf(key string) int {
	var best wireGroup
	for i := 1; i <= c.Size(); i++ {
		s := c.node(i)
		if s == nil {
			continue
		}
		v := s.View()
		if v == nil || len(v.Groups) == 0 {
			continue
		}
		g := v.Groups[wire.GroupOf(wire.KeyHash(c.opts.Namespace, key), len(v.Groups))]
		if g.Master != 0 && g.Epoch > best.Epoch {
			best = g
		}
	}
	return int(best.Master)
}

// wireGroup is a group's entry in a node's view.
type wireGroup = wire.GroupView

// Close stops every node and removes the cluster's data.
func (c *Cluster) Close() error {
	var errs []error
	for i := 1; i <= c.Size(); i++ {
		if err := c.StopNode(i); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
