package client

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// Agent is the client library's name and version, sent in every
// handshake.
const Agent = "paxlock-go/0.1"

// Config configures a Client. Registry, Namespace and Secret are required;
// every other field has a default used when it is zero.
type Config struct {
	// Registry lists node addresses, host:port, to fetch the cluster view
	// from; any one that answers is enough. Once connected the client also
	// knows every node's address from the view and falls back to those.
	Registry []string
	// Namespace is the tenant every request of this client belongs to.
	Namespace string
	// Secret is the namespace's secret. It never leaves the process: the
	// client proves it knows it with SCRAM-SHA-256, and checks that the
	// server holds the namespace's verifier.
	Secret string
	// TLS, if set, wraps every connection in TLS with this configuration
	// (a clone of it, with ServerName set to the address's host when
	// empty): use it with the nodes' TLS client listeners
	// (client_tls_addr) in Registry. A node serves a TLS connection the
	// view with the nodes' TLS addresses, so the client stays on TLS.
	// Without it, requests, client key and lock values cross the network
	// in clear (the secret never does). Its Certificates are presented to
	// nodes that ask for a client certificate (their client_tls section).
	TLS *tls.Config

	// Logger receives the client's log records (default slog.Default()).
	// Routine events are logged at Debug; lost locks at Warn.
	Logger *slog.Logger
	// Dial opens a connection (default: a net.Dialer with TCP keep-alive);
	// with TLS set, TLS runs over the connection it opens.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// DialTimeout bounds connecting plus the TLS and SCRAM handshakes
	// (default 3s).
	DialTimeout time.Duration
	// RequestTimeout bounds one attempt of one request (default 3s); the
	// caller's context bounds the whole call, retries included.
	RequestTimeout time.Duration
	// MaxRetries is how many times a request is re-sent after a retryable
	// outcome (TIMEOUT, MASTER_REDIRECT, OVERLOADED, NO_MASTER, MOVED, a
	// broken connection) before the call fails (default 10: with the
	// default backoff that spans about 4 s, longer than a master
	// failover). MOVING (a namespace move under way) is retried within
	// the caller's context, without using up retries.
	MaxRetries int
	// RetryBackoff is the first pause between attempts, doubled each time
	// up to MaxBackoff (defaults 10ms and 1s), with jitter.
	RetryBackoff, MaxBackoff time.Duration
	// HeartbeatInterval is how long a connection may be idle (nothing sent
	// or nothing received) before the client sends a Heartbeat (default
	// 3s); HeartbeatTimeout is how long
	// it then waits for any frame before it closes the connection and fails
	// its requests over (default 3s).
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// ViewRefresh is how often the client re-reads the cluster view even if
	// no push or error asked it to (default 30s).
	ViewRefresh time.Duration
	// ClockDrift is the fraction of a lock's TTL the client subtracts when
	// it counts the lock valid from the time it sent the request: valid
	// until send time + TTL − ClockDrift·TTL, on its monotonic clock
	// (default 0.05).
	ClockDrift float64
	// MaxFrame bounds the frames the client sends and accepts (default
	// wire.DefaultMaxFrame).
	MaxFrame int
	// CloseTimeout bounds how long Close spends leaving the servers' wait
	// queues and giving back grants that raced with cancelled waits
	// (default 2s). See Client.Close.
	CloseTimeout time.Duration
	// LocalQueue turns local queueing on (default off): blocking Locks
	// of this client's handles on the same key (exclusive locks and
	// write locks; not ProcessOwner handles) wait in the client, one of
	// them at a time on the server, and an Unlock hands the key on to
	// the next local waiter in the Release's own Paxos command, with a
	// new fencing token, when nobody from elsewhere waits for it. See
	// "Local queueing" in client/USAGE.md.
	LocalQueue bool
	// TracerProvider, when set, turns tracing on: a span per lock call
	// (Lock, TryLock, Unlock, Renew, SetValue and the semaphore's and
	// read-write lock's, which are Mutex calls underneath), whose trace
	// context travels in the request so that the nodes' spans join the
	// trace. Nil (the default) is off and costs nothing. Only the
	// OpenTelemetry API is used: the caller brings the SDK and exporter.
	TracerProvider trace.TracerProvider
	// TraceKeys adds the lock's key to its spans (attribute paxlock.key).
	// Off by default: keys may name customers or resources, and spans
	// leave the process; spans always carry the key's hash
	// (paxlock.key_hash), which joins them to the nodes' spans and logs.
	TraceKeys bool
}

// EnsureDefaults fills every unset field with its default (as New does),
// so that a caller can read the settings in force.
func (cfg *Config) EnsureDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.DialTimeout, 3*time.Second)
	def(&cfg.RequestTimeout, 3*time.Second)
	def(&cfg.RetryBackoff, 10*time.Millisecond)
	def(&cfg.MaxBackoff, time.Second)
	def(&cfg.HeartbeatInterval, 3*time.Second)
	def(&cfg.HeartbeatTimeout, 3*time.Second)
	def(&cfg.ViewRefresh, 30*time.Second)
	def(&cfg.CloseTimeout, 2*time.Second)
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 10
	}
	if cfg.ClockDrift <= 0 || cfg.ClockDrift >= 0.5 {
		cfg.ClockDrift = 0.05
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = wire.DefaultMaxFrame
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dial == nil {
		d := &net.Dialer{KeepAlive: 15 * time.Second}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}
	}
}

func (cfg *Config) validate() error {
	if len(cfg.Registry) == 0 {
		return invalid("no registry address")
	}
	for _, a := range cfg.Registry {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return invalid("registry address %q: %v", a, err)
		}
	}
	if err := wire.ValidateNamespace(cfg.Namespace); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(cfg.Secret) > wire.MaxSecretLen {
		return invalid("secret of %d bytes, limit %d", len(cfg.Secret), wire.MaxSecretLen)
	}
	return nil
}

// Client is a connection to one paxlock cluster for one namespace. It keeps
// one multiplexed connection per node it talks to, the cluster view (which
// node masters each group), the background renewals of auto-renewed locks
// and the registrations of blocked acquires and watches. Create one per
// process and namespace and share it: it is safe for concurrent use.
type Client struct {
	cfg Config
	// tracer is nil when tracing is off (Config.TracerProvider): see
	// trace.go.
	tracer trace.Tracer
	log    *slog.Logger
	id     uint64 // wire.ClientIDOf(key)
	key    string // the Hello's ClientKey: never logged

	// ctx is the context of the client's own background work (view
	// refreshes, renewals, clean-ups); it carries internalKey, so that
	// requests under it keep working while Close gives back what it must,
	// and is cancelled when Close stops the network.
	ctx    context.Context
	cancel context.CancelFunc
	// done is closed when Close starts: calls of the caller end with
	// ErrClosed and no new ones start. stopped is closed when Close has
	// finished its clean-ups and closes the connections.
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	loopDone  chan struct{}
	refreshCh chan struct{} // cap 1
	wide      atomic.Bool   // the next refresh asks other nodes too
	subLostCh chan struct{} // cap 1

	viewMu sync.Mutex
	view   atomic.Pointer[wire.View]
	// moveFrom holds the client addresses of the cluster the namespace
	// moved away from: a view naming one of them is that cluster's, and
	// is ignored. moveSeeds, when set, asks the next view refresh to find
	// the cluster the namespace moved to (see move.go).
	moveFrom  atomic.Pointer[map[string]bool]
	moveSeeds atomic.Pointer[moveNote]
	// viewCh is closed, and replaced, when a newer view is installed: a
	// request waiting to retry after NO_MASTER or a lost master wakes at
	// once instead of at the end of its backoff.
	viewCh atomic.Pointer[chan struct{}]

	nextOwner atomic.Uint64
	nextWait  atomic.Uint64
	nextWatch atomic.Uint64

	// connView is a read-only copy of conns for the request path's
	// lock-free lookup; it is replaced (under mu) whenever conns changes.
	connView atomic.Pointer[map[string]*conn]

	mu        sync.Mutex
	closed    bool // done is closed
	netClosed bool // stopped is closed
	// cleaners counts the background clean-ups running (see goClean);
	// cleanIdle, set by Close, is closed when the count drops to zero.
	cleaners  int
	cleanIdle chan struct{}
	conns     map[string]*conn
	dials     map[string]*dialing
	dialFails map[string]dialFailure
	subConn   *conn
	waits     map[uint64]*waiter
	watches   map[uint64]*Watcher
	holds     map[holdKey]*hold
	procLocks map[lockKey]*ownerLock

	// lqMu guards the local queues (localQs, their fields and
	// ownerLock.lq); see localq.go.
	lqMu    sync.Mutex
	localQs map[lockKey]*localQueue
}

// dialing is a connection attempt other callers can wait for.
type dialing struct {
	done chan struct{}
	cn   *conn
	err  error
}

type dialFailure struct {
	n    int
	last time.Time
	err  error // the last dial's error
}

// processOwnerID is the Owner.ID of ProcessOwner handles; per-handle owners
// count up from it.
const processOwnerID = 1

// New connects to the cluster: it fetches the view from the first Registry
// address that answers (trying the others in turn), subscribes to its
// changes, and returns a ready Client. A refused namespace or secret gives
// an error wrapping ErrAuth; no reachable node, ErrUnavailable. ctx bounds
// only the bootstrap.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Registry = slices.Clone(cfg.Registry)
	cfg.EnsureDefaults()
	c := &Client{
		tracer:    tracerOf(cfg.TracerProvider),
		cfg:       cfg,
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		loopDone:  make(chan struct{}),
		refreshCh: make(chan struct{}, 1),
		subLostCh: make(chan struct{}, 1),
		conns:     make(map[string]*conn),
		dials:     make(map[string]*dialing),
		dialFails: make(map[string]dialFailure),
		waits:     make(map[uint64]*waiter),
		watches:   make(map[uint64]*Watcher),
		holds:     make(map[holdKey]*hold),
		procLocks: make(map[lockKey]*ownerLock),
		localQs:   make(map[lockKey]*localQueue),
	}
	// The key proves the client's id to the servers (see
	// wire.ClientIDOf): 26 base32 characters of crypto/rand, 130 bits.
	c.key = crand.Text()
	c.id = wire.ClientIDOf(c.key)
	ch := make(chan struct{})
	c.viewCh.Store(&ch)
	c.ctx, c.cancel = context.WithCancel(context.WithValue(context.Background(), internalKey{}, true))
	c.log = cfg.Logger.With("paxlock_client", strconv.FormatUint(c.id, 16))
	c.nextOwner.Store(processOwnerID)
	if err := c.subscribe(ctx); err != nil {
		close(c.loopDone)
		_ = c.Close() // the subscription's error is the one to report
		return nil, err
	}
	go c.loop()
	return c, nil
}

// ID returns the client's id: the Owner.Client of every lock it takes, and
// the ClientID of its Hello. It is derived from a private key the client
// picked (see wire.ClientIDOf) and proves in every Hello, so another
// client that learns the id (from a State answer, say) cannot act as this
// client's owners.
func (c *Client) ID() uint64 {
	if c == nil {
		return 0
	}
	return c.id
}

// View returns the newest cluster view the client knows. The caller must
// not modify it.
func (c *Client) View() *wire.View {
	if c == nil {
		return nil
	}
	return c.view.Load()
}

// Close stops the client, within Config.CloseTimeout. Calls in progress
// and watches end with ErrClosed and renewals stop. Before it closes the
// connections, Close leaves the servers' wait queues (CancelWait for every
// blocking Lock still registered, including those whose context ended
// while their clean-up was under way) and releases every grant that raced
// with such a cancelled wait, so that no lock is left held for its TTL by a
// wait nobody will use. Then it releases every lock the client still
// holds (Mutex, RWMutex and election holds alike): each hold ends first —
// its Lost channel closes and Unlock reports an error wrapping ErrClosed —
// and its release is sent, all at once, so a clean shutdown frees its keys
// at once instead of after their TTL (etcd's Session.Close revokes its
// lease the same way). A release that cannot reach the cluster within the
// bound is abandoned and the lock expires after its TTL, as it does when
// the process dies without Close. Close is idempotent; it returns nil.
func (c *Client) Close() error { return c.CloseContext(context.Background()) }

// CloseContext is Close bounded by ctx as well as Config.CloseTimeout:
// when either ends, the clean-ups still under way are abandoned (their
// grants expire after their TTL) and the connections are closed.
func (c *Client) CloseContext(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.CloseTimeout)
		defer cancel()
		c.mu.Lock()
		c.closed = true
		waits := make([]*waiter, 0, len(c.waits))
		for _, w := range c.waits {
			waits = append(waits, w)
		}
		c.mu.Unlock()
		close(c.done)
		c.leaveQueues(ctx, waits)
		c.waitCleaners(ctx)
		c.releaseHolds(ctx)

		c.mu.Lock()
		c.netClosed = true
		conns := make([]*conn, 0, len(c.conns))
		for _, cn := range c.conns {
			conns = append(conns, cn)
		}
		watches := make([]*Watcher, 0, len(c.watches))
		for _, w := range c.watches {
			watches = append(watches, w)
		}
		c.mu.Unlock()
		c.cancel()
		close(c.stopped)
		for _, cn := range conns {
			cn.fail(ErrClosed)
		}
		for _, w := range watches {
			w.finish(ErrClosed)
		}
		<-c.loopDone
	})
	return nil
}

// leaveQueues runs Close's clean-up of the blocking acquires registered
// when it started, all at once, within ctx.
func (c *Client) leaveQueues(ctx context.Context, waits []*waiter) {
	if len(waits) == 0 {
		return
	}
	ctx = context.WithValue(ctx, internalKey{}, true)
	var wg sync.WaitGroup
	for _, w := range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.state.leaveAtClose(ctx, w)
		}()
	}
	wg.Wait()
}

// releaseHolds is Close's release of every lock the client holds, all at
// once, within ctx. Each hold is ended before its release leaves (see
// hold.endForClose), so nothing in this process goes on trusting a lock
// that is being given back; a hold that Unlock or a loss ended meanwhile
// is left alone.
func (c *Client) releaseHolds(ctx context.Context) {
	c.mu.Lock()
	hs := make([]*hold, 0, len(c.holds))
	for _, h := range c.holds {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	if len(hs) == 0 {
		return
	}
	ctx = context.WithValue(ctx, internalKey{}, true)
	var wg sync.WaitGroup
	for _, h := range hs {
		if !h.endForClose() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.do(ctx, "unlock", h.key, h.hash, wire.TypeRelease,
				&wire.Release{Key: h.key, Owner: h.owner, Token: h.token})
			if err == nil && res.resp.Status != wire.StatusSuccess {
				err = statusErr("unlock", h.key, res.resp)
			}
			if err != nil {
				c.log.Debug("paxlock: release at Close failed; the lock expires after its TTL", "key", h.key, "token", h.token, "err", err)
			}
		}()
	}
	wg.Wait()
}

// waitCleaners waits until the background clean-ups have finished, or ctx
// ends.
func (c *Client) waitCleaners(ctx context.Context) {
	c.mu.Lock()
	if c.cleaners == 0 {
		c.mu.Unlock()
		return
	}
	if c.cleanIdle == nil {
		c.cleanIdle = make(chan struct{})
	}
	idle := c.cleanIdle
	c.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		c.log.Debug("paxlock: close: clean-ups still under way are abandoned", "err", ctx.Err())
	}
}

// goClean runs f in the background as a clean-up that Close waits for
// (within its bound). It reports false, running nothing, once Close has
// stopped the network.
func (c *Client) goClean(f func()) bool {
	c.mu.Lock()
	if c.netClosed {
		c.mu.Unlock()
		return false
	}
	c.cleaners++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			if c.cleaners--; c.cleaners == 0 && c.cleanIdle != nil {
				close(c.cleanIdle)
				c.cleanIdle = nil
			}
			c.mu.Unlock()
		}()
		f()
	}()
	return true
}

// internalKey marks the contexts of the client's own work (Client.ctx and
// what derives from it, and Close's clean-ups): their requests go on
// while Close cleans up, until it stops the network.
type internalKey struct{}

// stopFor returns the channel whose closing ends work under ctx: stopped
// for the client's own work, done for the caller's.
func (c *Client) stopFor(ctx context.Context) <-chan struct{} {
	if ctx.Value(internalKey{}) != nil {
		return c.stopped
	}
	return c.done
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (c *Client) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// backoff is the pause before attempt n (n >= 1), with jitter: between
// half and all of backoffCeil(n).
func (c *Client) backoff(n int) time.Duration {
	d := c.backoffCeil(n)
	return d/2 + mrand.N(d/2+1)
}

// backoffCeil is the longest pause before attempt n: RetryBackoff doubled
// per attempt, at most MaxBackoff.
func (c *Client) backoffCeil(n int) time.Duration {
	d := c.cfg.RetryBackoff << min(n-1, 20)
	if d <= 0 || d > c.cfg.MaxBackoff {
		d = c.cfg.MaxBackoff
	}
	return d
}

// sleep waits d, or until ctx ends or the client closes.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	return c.sleepOrView(ctx, d, nil)
}

// sleepOrView is sleep that also ends early, with a nil error, when
// viewCh (from viewChanged; nil: never) is closed by a newer view.
func (c *Client) sleepOrView(ctx context.Context, d time.Duration, viewCh <-chan struct{}) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-viewCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopFor(ctx):
		return ErrClosed
	}
}

// viewChanged returns a channel closed when a view newer than the current
// one is installed.
func (c *Client) viewChanged() <-chan struct{} { return *c.viewCh.Load() }
