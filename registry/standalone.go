package registry

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// StandaloneConfig configures a Standalone registry.
type StandaloneConfig struct {
	// Listen is the client address, host:port (port 0 picks one; see
	// Standalone.Addr).
	Listen string
	// Meta, when set, is the source of the registry's tables: the
	// clusters, the namespaces' assignments and their verifiers come from
	// the meta cluster (see MetaConfig) and change live; Clusters,
	// Namespaces and Secrets must then be empty. Unset, the tables are the
	// static ones below.
	Meta *MetaConfig
	// AdminListen, if set, is the address (host:port) of the registry's
	// HTTP status endpoint: GET /status (RegistryStatus as JSON) and
	// /metrics (Prometheus).
	AdminListen string
	// AdminToken is the bearer token the registry sends to the lock
	// clusters' admin endpoints when it installs namespace verifiers
	// there (meta tables only), and which its own status endpoint
	// requires ("Authorization: Bearer <token>", else 401) when set.
	// Never logged.
	AdminToken string
	// AdminAllowedHosts are further host names the status endpoint
	// answers to in a request's Host header, besides IP literals,
	// localhost and AdminListen's and Listen's hosts ("*": any); another
	// Host is refused 403, against DNS rebinding.
	AdminAllowedHosts []string

	// Clusters maps each cluster's name to its nodes' client addresses,
	// host:port. The registry follows every cluster listed.
	Clusters map[string][]string
	// Namespaces maps each namespace to the cluster that serves it. A
	// handshake naming a namespace not listed is refused with
	// AUTH_FAILED.
	Namespaces map[string]string
	// Secrets holds each namespace's secret (every namespace in
	// Namespaces needs one): clients authenticate to the registry with
	// SCRAM-SHA-256 as to a node, and the registry keeps only the
	// verifiers it derives from the secrets at start. A secret changed on
	// the cluster at run time must be changed here too (and the registry
	// restarted), or the registry refuses the namespace's clients.
	Secrets map[string]string
	// UpstreamAuth optionally gives, per cluster, a namespace and its
	// secret with which the registry authenticates on its connections to
	// that cluster's nodes. paxlock nodes serve views without
	// authentication, so it is normally unset.
	UpstreamAuth map[string]UpstreamAuth

	// MaxFrame bounds a client frame, header included (default
	// wire.DefaultMaxFrame). A frame over it closes the connection.
	MaxFrame int
	// MaxConns bounds the client connections (default 10000); more are
	// closed at once.
	MaxConns int
	// IdleTimeout closes a client connection that sent nothing, not even
	// a Heartbeat, for this long (default 2m).
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client (default 10s); a client
	// that does not read is disconnected.
	WriteTimeout time.Duration

	// DialTimeout bounds connecting to a cluster node (default 3s).
	DialTimeout time.Duration
	// HeartbeatInterval is how long a cluster connection may be quiet
	// before the registry sends a Heartbeat on it (default 3s). A
	// connection that answers nothing within RequestTimeout of a Heartbeat
	// is dropped and the registry moves to another node.
	HeartbeatInterval time.Duration
	// RequestTimeout bounds a cluster node's reply (default 3s).
	RequestTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the pause before reconnecting
	// to a cluster after every node failed (defaults 100ms and 5s; the
	// pause doubles from min to max, with jitter).
	ReconnectMin, ReconnectMax time.Duration

	// Logger receives the registry's logs (default slog.Default()).
	Logger *slog.Logger
}

// EnsureDefaults fills every unset field with its default; NewStandalone
// calls it.
func (c *StandaloneConfig) EnsureDefaults() {
	if c.MaxFrame <= 0 {
		c.MaxFrame = wire.DefaultMaxFrame
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 10000
	}
	defaultDuration(&c.IdleTimeout, 2*time.Minute)
	defaultDuration(&c.WriteTimeout, 10*time.Second)
	defaultDuration(&c.DialTimeout, 3*time.Second)
	defaultDuration(&c.HeartbeatInterval, 3*time.Second)
	defaultDuration(&c.RequestTimeout, 3*time.Second)
	defaultDuration(&c.ReconnectMin, 100*time.Millisecond)
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = max(5*time.Second, c.ReconnectMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// defaultDuration sets *d to v when it is unset (zero or negative).
func defaultDuration(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// splitHostPort splits addr, host:port, and checks that the port is a
// number from 0 to 65535.
func splitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", port)
	}
	return host, p, nil
}

func (c *StandaloneConfig) validate() error {
	var errs []error
	if _, _, err := splitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: %w", c.Listen, err))
	}
	switch {
	case c.Meta != nil && (len(c.Clusters) > 0 || len(c.Namespaces) > 0 || len(c.Secrets) > 0):
		errs = append(errs, errors.New("meta and a static table (clusters, namespaces, secrets) exclude each other: with meta, the tables come from the meta cluster"))
	case c.Meta != nil:
		errs = append(errs, c.Meta.validate()...)
	case len(c.Clusters) == 0:
		errs = append(errs, errors.New("no clusters (and no meta cluster)"))
	}
	for name, addrs := range c.Clusters {
		if name == "" {
			errs = append(errs, errors.New("a cluster has an empty name"))
		}
		if len(addrs) == 0 {
			errs = append(errs, fmt.Errorf("cluster %q lists no nodes", name))
		}
		for _, a := range addrs {
			if _, _, err := splitHostPort(a); err != nil {
				errs = append(errs, fmt.Errorf("cluster %q: node %q: %w", name, a, err))
			}
		}
	}
	for ns, cl := range c.Namespaces {
		if err := wire.ValidateNamespace(ns); err != nil {
			errs = append(errs, fmt.Errorf("namespace %q: %w", ns, err))
		}
		if _, ok := c.Clusters[cl]; !ok {
			errs = append(errs, fmt.Errorf("namespace %q maps to unknown cluster %q", ns, cl))
		}
		if _, ok := c.Secrets[ns]; !ok {
			errs = append(errs, fmt.Errorf("namespace %q has no secret (secrets): clients authenticate to the registry with SCRAM", ns))
		}
	}
	for ns := range c.Secrets {
		if _, ok := c.Namespaces[ns]; !ok {
			errs = append(errs, fmt.Errorf("secret for namespace %q, which maps to no cluster", ns))
		}
	}
	for cl, a := range c.UpstreamAuth {
		if _, ok := c.Clusters[cl]; !ok {
			errs = append(errs, fmt.Errorf("upstream auth for unknown cluster %q", cl))
		}
		if err := wire.ValidateNamespace(a.Namespace); err != nil {
			errs = append(errs, fmt.Errorf("upstream auth for cluster %q: %w", cl, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry: config: %w", err)
	}
	return nil
}

// UpstreamAuth is a namespace and its secret, for the registry's
// connections to a cluster (see StandaloneConfig.UpstreamAuth).
type UpstreamAuth struct {
	Namespace, Secret string
}

// Standalone is a registry process serving the cluster views of several
// clusters, each namespace mapped to one cluster (WLock's registry model,
// over paxlock's wire protocol). For every cluster it keeps one connection
// to a node, subscribed to the node's view and falling back to the other
// nodes when it breaks, and caches the highest-version view seen. Clients
// connect to it as to a node: the SCRAM handshake with their namespace
// (the registry holds the namespaces' verifiers, see
// StandaloneConfig.Secrets), then GetView or
// SubscribeView for the namespace's cluster, then Heartbeats. Lock requests
// are refused with BAD_REQUEST.
type Standalone struct {
	cfg StandaloneConfig
	log *slog.Logger

	// The tables (tables.go), replaced whole by applyTables. Lock order:
	// tmu before a cluster's mu before an rconn's mu.
	tmu      sync.RWMutex
	clusters map[string]*clusterState
	nsMap    map[string]nsEntry // by namespace; verifiers never logged
	tables   *wire.RegistryTables

	meta      metaState  // the meta cluster's subscription (meta.go)
	inst      installer  // verifiers installed on the lock clusters (install.go)
	moves     moveRunner // namespace moves driven while holding the mover lock (moves.go)
	admin     *http.Server
	adminAddr net.Addr

	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[*rconn]struct{}
	started bool
	closed  bool
}

// clusterState is the registry's knowledge of one cluster.
type clusterState struct {
	name string
	auth *wire.ScramClientFirst // the upstream handshake's identity, with authSecret
	// authSecret is UpstreamAuth's secret. Never logged.
	authSecret string
	// ctx ends when the registry shuts down or the cluster leaves the
	// tables; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	addrs []string
	view  *wire.View
	// subs maps each subscribed connection to the assignment epoch of
	// its namespace, which the versions of its views start with.
	subs     map[*rconn]uint64
	ready    chan struct{}
	upstream string
}

// ClusterStatus describes what a Standalone registry knows of a cluster.
type ClusterStatus struct {
	// Name is the cluster's name.
	Name string
	// Upstream is the node address the registry is following, or "" while
	// it is connected to none.
	Upstream string
	// HasView reports whether any view has been received.
	HasView bool
	// Version is the cached view's version.
	Version uint64
	// Subscribers is the number of client connections subscribed.
	Subscribers int
}

// NewStandalone checks cfg and returns a registry that Start will open.
func NewStandalone(cfg StandaloneConfig) (*Standalone, error) {
	cfg.EnsureDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Standalone{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "registry"),
		clusters: map[string]*clusterState{},
		nsMap:    map[string]nsEntry{},
		conns:    map[*rconn]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.meta.init()
	s.inst.init(s)
	s.moves.init(s)
	if cfg.Meta != nil {
		return s, nil
	}
	t, err := staticTables(cfg)
	if err != nil {
		return nil, err
	}
	s.applyTables(t)
	return s, nil
}

// newClusterState makes the state of a cluster the tables name.
func (s *Standalone) newClusterState(name string, addrs []string) *clusterState {
	cl := &clusterState{name: name, addrs: slices.Clone(addrs), subs: map[*rconn]uint64{}, ready: make(chan struct{})}
	cl.ctx, cl.cancel = context.WithCancel(s.ctx)
	if a, ok := s.cfg.UpstreamAuth[name]; ok {
		key := crand.Text()
		cl.auth = &wire.ScramClientFirst{Namespace: a.Namespace, ClientID: wire.ClientIDOf(key), ClientKey: key, Agent: "paxlock-registry"}
		cl.authSecret = a.Secret
	}
	return cl
}

// Start opens the client listener and starts following every cluster. It
// returns once the listener accepts connections; clients that ask before a
// cluster's first view arrives get NO_MASTER (retryable). See WaitReady.
func (s *Standalone) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return errors.New("registry: already started")
	}
	s.started = true
	s.mu.Unlock()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("registry: listen: %w", err)
	}
	s.ln = ln
	if err := s.startAdmin(ctx); err != nil {
		ln.Close()
		return err
	}
	s.tmu.RLock()
	for _, cl := range s.clusters {
		s.wg.Add(1)
		go s.follow(cl)
	}
	nc, nn := len(s.clusters), len(s.nsMap)
	s.tmu.RUnlock()
	if s.cfg.Meta != nil {
		s.wg.Add(1)
		go s.followMeta()
	}
	s.wg.Add(3)
	go s.inst.run()
	go s.moves.run()
	go s.accept()
	s.log.Info("registry serving", "addr", ln.Addr().String(), "clusters", nc, "namespaces", nn, "meta", s.cfg.Meta != nil)
	return nil
}

// Addr returns the client listener's address (nil before Start).
func (s *Standalone) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// View returns the cached view of the named cluster and whether there is
// one. The view is shared: do not modify it.
func (s *Standalone) View(cluster string) (*wire.View, bool) {
	s.tmu.RLock()
	cl := s.clusters[cluster]
	s.tmu.RUnlock()
	if cl == nil {
		return nil, false
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.view, cl.view != nil
}

// Status describes every cluster, sorted by name.
func (s *Standalone) Status() []ClusterStatus {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	out := make([]ClusterStatus, 0, len(s.clusters))
	for _, cl := range s.clusters {
		cl.mu.Lock()
		st := ClusterStatus{Name: cl.name, Upstream: cl.upstream, HasView: cl.view != nil, Subscribers: len(cl.subs)}
		if cl.view != nil {
			st.Version = cl.view.Version
		}
		cl.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// WaitReady waits until the registry has its tables (from the meta
// cluster: the first ones it receives) and every cluster they name has a
// view, or ctx ends.
func (s *Standalone) WaitReady(ctx context.Context) error {
	if s.cfg.Meta != nil {
		select {
		case <-s.meta.ready:
		case <-ctx.Done():
			return fmt.Errorf("registry: waiting for the meta cluster's tables: %w", ctx.Err())
		}
	}
	s.tmu.RLock()
	cls := make([]*clusterState, 0, len(s.clusters))
	for _, cl := range s.clusters {
		cls = append(cls, cl)
	}
	s.tmu.RUnlock()
	for _, cl := range cls {
		select {
		case <-cl.ready:
		case <-ctx.Done():
			return fmt.Errorf("registry: waiting for cluster %q: %w", cl.name, ctx.Err())
		}
	}
	return nil
}

// Shutdown closes the listener and every client connection, stops
// following the clusters, and waits for the registry's goroutines or for
// ctx.
func (s *Standalone) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	if !started {
		s.cancel()
	}
	conns := make([]*rconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if !started {
		return nil
	}
	s.cancel()
	err := s.ln.Close()
	if s.admin != nil {
		_ = s.admin.Close() // its connections end with it
	}
	for _, c := range conns {
		c.kill()
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("registry: shutdown: %w", ctx.Err())
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("registry: shutdown: %w", err)
	}
	return nil
}

// ---- clients ----

// maxPending bounds the bytes queued for one client; a client that lets
// more pile up is disconnected.
const maxPending = 4 << 20

func (s *Standalone) accept() {
	defer s.wg.Done()
	pause := 5 * time.Millisecond
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			s.log.Warn("registry: accept", "err", err, "pause", pause)
			select {
			case <-time.After(pause):
			case <-s.ctx.Done():
				return
			}
			pause = min(pause*2, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		c := &rconn{s: s, nc: nc, codec: wire.NewCodec(), wake: make(chan struct{}, 1), done: make(chan struct{})}
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.cfg.MaxConns {
			full := !s.closed
			s.mu.Unlock()
			if full {
				s.log.Warn("registry: too many connections, refusing one", "remote", nc.RemoteAddr().String(), "max", s.cfg.MaxConns)
			}
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go c.readLoop()
		go c.writeLoop()
	}
}

func (cl *clusterState) version() uint64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.view == nil {
		return 0
	}
	return cl.view.Version
}

// update caches v if it is the first view or newer than the cached one,
// and pushes it to the subscribers. It reports whether v was taken.
func (cl *clusterState) update(v *wire.View, log *slog.Logger) bool {
	if len(v.Groups) == 0 {
		log.Warn("registry: ignoring a view with no groups", "cluster", cl.name, "version", v.Version)
		return false
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.view != nil && v.Version <= cl.view.Version {
		return false
	}
	first := cl.view == nil
	cl.view = v
	frames := map[uint64][]byte{} // by epoch
	for c, epoch := range cl.subs {
		frame, ok := frames[epoch]
		if !ok {
			var err error
			if frame, err = wire.AppendFrame(nil, wire.TypeViewChanged, 0, stamped(v, epoch)); err != nil {
				log.Error("registry: encoding a view", "cluster", cl.name, "err", err)
				return false
			}
			frames[epoch] = frame
		}
		c.mu.Lock()
		c.enqueueLocked(frame)
		c.mu.Unlock()
	}
	if first {
		close(cl.ready)
	}
	log.Debug("registry: view", "cluster", cl.name, "version", v.Version, "subscribers", len(cl.subs))
	return true
}

func (cl *clusterState) setUpstream(addr string) {
	cl.mu.Lock()
	cl.upstream = addr
	cl.mu.Unlock()
}

// candidates lists the addresses to follow the cluster at: the configured
// nodes, then nodes the cached view names (alive ones first).
func (cl *clusterState) candidates() []string {
	cl.mu.Lock()
	out := slices.Clone(cl.addrs)
	v := cl.view
	cl.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range out {
		seen[a] = true
	}
	if v != nil {
		for _, alive := range []bool{true, false} {
			for _, n := range v.Nodes {
				if n.Alive == alive && n.Addr != "" && !seen[n.Addr] {
					seen[n.Addr] = true
					out = append(out, n.Addr)
				}
			}
		}
	}
	return out
}
