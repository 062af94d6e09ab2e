package client

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/scramauth"
	"github.com/paxlock/paxlock/session"
	"github.com/paxlock/paxlock/wire"
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
	// in clear (the secret never does).
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
	// outcome (TIMEOUT, MASTER_REDIRECT, OVERLOADED, NO_MASTER, a broken
	// connection) before the call fails (default 10: with the default
	// backoff that spans about 4 s, longer than a master failover).
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
}

func (cfg *Config) setDefaults() {
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
	log *slog.Logger
	id  uint64 // wire.ClientIDOf(key)
	key string // the Hello's ClientKey: never logged

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
	procCores map[coreKey]*lockCore

	// lqMu guards the local queues (localQs, their fields and
	// lockCore.lq); see localq.go.
	lqMu    sync.Mutex
	localQs map[coreKey]*localQueue
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
	cfg.setDefaults()
	c := &Client{
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
		procCores: make(map[coreKey]*lockCore),
		localQs:   make(map[coreKey]*localQueue),
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
			w.core.leaveAtClose(ctx, w)
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

// validUntil is when a lock granted for ttl on a request sent at from
// stops being valid on the client's clock.
func (c *Client) validUntil(from time.Time, ttl time.Duration) time.Time {
	return from.Add(ttl - time.Duration(float64(ttl)*c.cfg.ClockDrift))
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

// ---- connections ----

// getConn returns a working connection to addr, dialing (once, shared by
// concurrent callers) if there is none.
func (c *Client) getConn(ctx context.Context, addr string) (*conn, error) {
	if m := c.connView.Load(); m != nil {
		if cn := (*m)[addr]; cn != nil && !cn.dead() {
			return cn, nil
		}
	}
	stop := c.stopFor(ctx)
	if isDone(stop) {
		return nil, ErrClosed
	}
	c.mu.Lock()
	if c.netClosed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if cn := c.conns[addr]; cn != nil && !cn.dead() {
		c.mu.Unlock()
		return cn, nil
	}
	d := c.dials[addr]
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		c.dials[addr] = d
		go c.dial(addr, d)
	}
	c.mu.Unlock()
	select {
	case <-d.done:
		return d.cn, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
		return nil, ErrClosed
	}
}

// publishConnsLocked refreshes connView from conns; c.mu is held.
func (c *Client) publishConnsLocked() {
	m := make(map[string]*conn, len(c.conns))
	for a, cn := range c.conns {
		m[a] = cn
	}
	c.connView.Store(&m)
}

// dial connects to addr and says Hello, after a pause if recent attempts
// to addr failed (reconnect backoff).
func (c *Client) dial(addr string, d *dialing) {
	cn, err := c.dialHello(addr)
	c.mu.Lock()
	delete(c.dials, addr)
	switch {
	case err == nil && c.netClosed:
		err = ErrClosed
	case err == nil:
		c.conns[addr] = cn
		c.publishConnsLocked()
		cn.ready = true
		delete(c.dialFails, addr)
	default:
		f := c.dialFails[addr]
		c.dialFails[addr] = dialFailure{n: f.n + 1, last: time.Now()}
	}
	c.mu.Unlock()
	if err != nil && cn != nil {
		cn.fail(err)
		cn = nil
	}
	d.cn, d.err = cn, err
	close(d.done)
}

func (c *Client) dialHello(addr string) (*conn, error) {
	c.mu.Lock()
	f := c.dialFails[addr]
	c.mu.Unlock()
	if f.n > 0 {
		wait := time.Until(f.last.Add(c.backoff(f.n)))
		if err := c.sleep(c.ctx, wait); err != nil {
			return nil, ErrClosed
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout)
	defer cancel()
	sc, r, err := session.Dial(ctx, addr, c.sessionConfig())
	var refused *session.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Reply.Status == wire.StatusAuthFailed:
		return nil, fmt.Errorf("%w: namespace %q at %s: %s", ErrAuth, c.cfg.Namespace, addr, refused.Reply.Msg)
	case errors.Is(err, scramauth.ErrServerUnverified):
		return nil, fmt.Errorf("%w: namespace %q at %s: %w", ErrAuth, c.cfg.Namespace, addr, err)
	case errors.As(err, &refused):
		return nil, fmt.Errorf("hello to %s: %w", addr, statusErr("hello", c.cfg.Namespace, &refused.Reply))
	case errors.Is(err, session.ErrUnexpectedReply):
		return nil, fmt.Errorf("%w: %w", ErrServer, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cn := newConn(c, addr, sc)
	cn.start()
	c.noteViewVersion(r.ViewVersion)
	c.log.Debug("paxlock: connected", "addr", addr)
	return cn, nil
}

// onConnLost runs once per failed connection: it forgets the connection
// and re-routes what lived on it. Blocked acquires re-send themselves;
// watches register again; the view subscription moves to another node.
func (c *Client) onConnLost(cn *conn, cause error) {
	c.mu.Lock()
	live := cn.ready // false for a connection that failed before dial registered it
	if c.conns[cn.addr] == cn {
		delete(c.conns, cn.addr)
		c.publishConnsLocked()
	}
	sub := c.subConn == cn
	if sub {
		c.subConn = nil
	}
	var orphans []*waiter
	for id, w := range c.waits {
		if w.conn != cn {
			continue
		}
		if w.abandoned {
			// The server forgets a connection's waiters when it closes.
			delete(c.waits, id)
			orphans = append(orphans, w)
			continue
		}
		w.signalResend()
	}
	var rereg []*Watcher
	for _, w := range c.watches {
		if w.conn == cn {
			w.conn = nil
			rereg = append(rereg, w)
		}
	}
	closed := c.netClosed
	c.mu.Unlock()
	for _, w := range orphans {
		c.unrefCore(w.core)
	}
	if closed || !live {
		return
	}
	c.log.Debug("paxlock: connection lost", "addr", cn.addr, "err", cause)
	if sub {
		select {
		case c.subLostCh <- struct{}{}:
		default:
		}
	}
	c.refresh()
	for _, w := range rereg {
		w.reregister()
	}
}

// ---- the cluster view ----

// refreshWide asks the background loop to re-read the view soon, from
// other nodes as well as the subscribed one: a group's master said it
// serves nothing, or the view names none. The subscribed node's view can
// be stale when that node is cut off from its peers (it still names itself
// as the master of the groups it lost); the other nodes' views carry the
// new masters with higher ballots, so updateView takes theirs.
func (c *Client) refreshWide() {
	c.wide.Store(true)
	c.refresh()
}

// refresh asks the background loop to re-read the view soon.
func (c *Client) refresh() {
	select {
	case c.refreshCh <- struct{}{}:
	default:
	}
}

// noteViewVersion refreshes the view if a server knows a newer one.
func (c *Client) noteViewVersion(v uint64) {
	if cur := c.view.Load(); v != 0 && (cur == nil || v > cur.Version) {
		c.refresh()
	}
}

// updateView installs v if it is newer than the current view, and moves
// blocked acquires and watches whose group master changed.
func (c *Client) updateView(v *wire.View) bool {
	c.viewMu.Lock()
	cur := c.view.Load()
	if cur != nil && v.Version <= cur.Version {
		c.viewMu.Unlock()
		return false
	}
	c.view.Store(v)
	next := make(chan struct{})
	close(*c.viewCh.Swap(&next))
	c.viewMu.Unlock()
	c.log.Debug("paxlock: view", "version", v.Version, "groups", len(v.Groups), "nodes", len(v.Nodes))

	c.mu.Lock()
	for _, w := range c.waits {
		if w.conn == nil || w.abandoned {
			continue
		}
		if newTerm(cur, v, wire.GroupOf(w.hash, len(v.Groups)), w.master) {
			w.signalResend()
		}
	}
	var rereg []*Watcher
	for _, w := range c.watches {
		if w.conn == nil {
			continue
		}
		if newTerm(cur, v, wire.GroupOf(w.hash, len(v.Groups)), w.master) {
			w.conn = nil
			rereg = append(rereg, w)
		}
	}
	c.mu.Unlock()
	for _, w := range rereg {
		w.reregister()
	}
	return true
}

// newTerm reports whether view v names a master for group g other than
// master, the one a wait or watch was registered with, or shows that g's
// master began a new term since view cur (it stepped down and was elected
// again). A master keeps waits and watches in memory for one term only, so
// either way they must be sent again; re-sending one that survived is
// harmless (same WaitID, duplicate events dropped).
func newTerm(cur, v *wire.View, g int, master string) bool {
	addr, ok := v.MasterAddr(g)
	if !ok {
		return false // no master yet: the next view will tell
	}
	if addr != master {
		return true
	}
	if cur == nil || len(cur.Groups) != len(v.Groups) {
		return false
	}
	was := cur.Groups[g]
	return was.Addr == master && was.Epoch != v.Groups[g].Epoch
}

// masterAddr returns the address of the master of key's group in the
// current view.
func (c *Client) masterAddr(hash uint64) (string, bool) {
	v := c.view.Load()
	if v == nil {
		return "", false
	}
	return v.MasterAddr(wire.GroupOf(hash, len(v.Groups)))
}

// candidates lists the addresses to fetch the view from: the view's nodes
// (alive ones first), then the configured registry addresses.
func (c *Client) candidates() []string {
	var out []string
	seen := make(map[string]bool)
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if v := c.view.Load(); v != nil {
		nodes := slices.Clone(v.Nodes)
		mrand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		slices.SortStableFunc(nodes, func(a, b wire.NodeView) int {
			switch {
			case a.Alive == b.Alive:
				return 0
			case a.Alive:
				return -1
			}
			return 1
		})
		for _, n := range nodes {
			add(n.Addr)
		}
	}
	for _, a := range c.cfg.Registry {
		add(a)
	}
	return out
}

// subscribe fetches the view from the first candidate that answers and
// subscribes to its changes there. AUTH_FAILED ends it at once.
func (c *Client) subscribe(ctx context.Context) error {
	var errs []error
	for _, addr := range c.candidates() {
		err := c.subscribeAt(ctx, addr)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrClosed) {
			return err
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return fmt.Errorf("%w: no node answered: %w", ErrUnavailable, errors.Join(errs...))
}

func (c *Client) subscribeAt(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout+c.cfg.RequestTimeout)
	defer cancel()
	cn, err := c.getConn(ctx, addr)
	if err != nil {
		return err
	}
	v, err := c.fetchView(ctx, cn, wire.TypeSubscribeView)
	if err != nil {
		return err
	}
	if len(v.Groups) == 0 {
		return fmt.Errorf("%w: view from %s lists no groups", ErrServer, addr)
	}
	c.updateView(v)
	c.mu.Lock()
	if !cn.dead() {
		c.subConn = cn
	}
	c.mu.Unlock()
	if cn.dead() {
		return fmt.Errorf("%w: %s closed", ErrUnavailable, addr)
	}
	return nil
}

func (c *Client) fetchView(ctx context.Context, cn *conn, typ wire.Type) (*wire.View, error) {
	var m wire.Message = &wire.GetView{}
	if typ == wire.TypeSubscribeView {
		m = &wire.SubscribeView{}
	}
	rt, msg, err := cn.roundTrip(ctx, typ, m, c.cfg.RequestTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: view from %s: %w", ErrUnavailable, cn.addr, err)
	}
	switch r := msg.(type) {
	case *wire.View:
		return r, nil
	case *wire.Response:
		if r.Status == wire.StatusAuthFailed {
			return nil, fmt.Errorf("%w: view from %s", ErrAuth, cn.addr)
		}
		return nil, statusErr("view", cn.addr, r)
	}
	return nil, fmt.Errorf("%w: view from %s: unexpected %s", ErrServer, cn.addr, rt)
}

// loop keeps the view fresh: it re-subscribes when the subscription's
// connection fails, re-reads the view when asked (redirects, NO_MASTER,
// lost connections, a newer version seen in a heartbeat) and every
// ViewRefresh.
func (c *Client) loop() {
	defer close(c.loopDone)
	tick := time.NewTicker(c.cfg.ViewRefresh)
	defer tick.Stop()
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-c.done:
			return
		case <-c.subLostCh:
		case <-c.refreshCh:
		case <-tick.C:
		case <-retry:
		}
		retry = nil
		if err := c.refreshOnce(); err != nil {
			failures++
			c.log.Debug("paxlock: view refresh failed", "err", err)
			retry = time.After(c.backoff(failures))
			continue
		}
		failures = 0
		// Coalesce bursts of refresh requests.
		if c.sleep(context.Background(), c.cfg.RetryBackoff) != nil {
			return
		}
	}
}

func (c *Client) refreshOnce() error {
	c.mu.Lock()
	sub := c.subConn
	c.mu.Unlock()
	var err error
	if sub == nil || sub.dead() {
		err = c.subscribe(c.ctx)
	} else {
		var v *wire.View
		if v, err = c.fetchView(c.ctx, sub, wire.TypeGetView); err == nil {
			c.updateView(v)
		}
	}
	if c.wide.Swap(false) {
		c.refreshFromOthers()
	}
	return err
}

// widePeers is how many nodes besides the subscribed one a wide refresh
// asks for their view.
const widePeers = 2

// refreshFromOthers reads the view from up to widePeers nodes other than
// the subscribed one and installs the newest.
func (c *Client) refreshFromOthers() {
	c.mu.Lock()
	var skip string
	if c.subConn != nil {
		skip = c.subConn.addr
	}
	c.mu.Unlock()
	asked := 0
	for _, addr := range c.candidates() {
		if addr == skip || c.unreachable(addr) {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout+c.cfg.RequestTimeout)
		cn, err := c.getConn(ctx, addr)
		if err == nil {
			var v *wire.View
			if v, err = c.fetchView(ctx, cn, wire.TypeGetView); err == nil && len(v.Groups) > 0 {
				c.updateView(v)
			}
		}
		cancel()
		if asked++; asked == widePeers {
			return
		}
	}
}

// ---- requests ----

// result is the outcome of a routed request.
type result struct {
	resp *wire.Response
	cn   *conn
	// master is the node the request was meant for: cn's address, or the
	// master's when cn is another node that relayed it (see attempt).
	// Blocked acquires and watches are bound to it.
	master string
	// unknown: an earlier attempt may have reached the server and been
	// applied (its connection broke, or it timed out, before the reply).
	unknown bool
}

// do sends a keyed request to the master of the key's group and returns
// the first non-retryable answer. It follows MASTER_REDIRECT, waits out
// NO_MASTER and OVERLOADED (RetryAfterMs or backoff), re-sends after
// TIMEOUT and broken connections, refreshing the view as it goes, up to
// MaxRetries re-sends and within ctx. Every request the client sends is
// safe to repeat: a re-sent Acquire by the holder keeps its token.
func (c *Client) do(ctx context.Context, op, key string, hash uint64, typ wire.Type, m wire.Message) (result, error) {
	var (
		res       result
		lastErr   error
		target    string
		redirects int
	)
	stop := c.stopFor(ctx)
	for attempt := 0; ; attempt++ {
		if isDone(stop) {
			return res, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return res, ctxErr(op, key, err, lastErr)
		}
		delay := time.Duration(-1) // -1: the usual backoff
		// Routing failures wait for the backoff or a newer view, whichever
		// comes first: a failover shows up as a view push.
		var viewCh <-chan struct{}
		routing := c.viewChanged()
		routedTo, _ := c.masterAddr(hash) // the master as that view has it
		r, cn, master, err := c.attempt(ctx, stop, hash, target, typ, m, redirects)
		target = ""
		switch {
		case err == nil:
			res.resp, res.cn, res.master = r, cn, master
			switch r.Status {
			case wire.StatusMasterRedirect:
				c.refresh()
				redirects++
				if r.Redirect != "" && r.Redirect != cn.addr {
					target = r.Redirect
					if redirects <= 2 {
						delay = 0 // follow a redirect at once, twice
					}
				}
			case wire.StatusNoMaster:
				c.refreshWide()
				delay = max(time.Duration(r.RetryAfterMs)*time.Millisecond, c.backoff(attempt+1))
				viewCh = routing
			case wire.StatusOverloaded:
				delay = max(time.Duration(r.RetryAfterMs)*time.Millisecond, c.backoff(attempt+1))
			case wire.StatusTimeout:
				res.unknown = true
			default:
				return res, nil // an answer for the caller, AUTH_FAILED included
			}
			lastErr = statusErr(op, key, r)
			res.resp = nil
		case errors.Is(err, ErrAuth), errors.Is(err, ErrClosed):
			return res, err
		case errors.Is(err, errConnLost), errors.Is(err, errAttemptTimeout):
			res.unknown = true
			viewCh = routing
			if errors.Is(err, errAttemptTimeout) {
				lastErr = fmt.Errorf("%w: %s %q at %s: %w", ErrTimeout, op, key, cn.addr, err)
			} else {
				lastErr = fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, key, err)
			}
		case ctx.Err() != nil:
			if cn != nil {
				res.unknown = true // the request may have been sent
			}
			return res, ctxErr(op, key, ctx.Err(), lastErr)
		case errors.Is(err, ErrNoMaster), errors.Is(err, ErrUnavailable), errors.Is(err, ErrOverloaded):
			lastErr = fmt.Errorf("client: %s %q: %w", op, key, err)
			if !errors.Is(err, ErrOverloaded) {
				viewCh = routing
			}
		default:
			return res, err // encoding errors, unexpected replies
		}
		if attempt >= c.cfg.MaxRetries {
			return res, lastErr
		}
		if delay < 0 {
			delay = c.backoff(attempt + 1)
		}
		if err := c.sleepOrMove(ctx, delay, viewCh, hash, routedTo); err != nil {
			if errors.Is(err, ErrClosed) {
				return res, ErrClosed
			}
			return res, ctxErr(op, key, err, lastErr)
		}
	}
}

// sleepOrMove is sleepOrView for a routing failure of hash's request
// sent to master: it ends early only once a newer view names another
// master for hash's group. Views that leave that master where it was (a
// failover moves the groups one by one, each a view push) do not end it,
// so that they do not use up the request's retries.
func (c *Client) sleepOrMove(ctx context.Context, d time.Duration, viewCh <-chan struct{}, hash uint64, master string) error {
	if viewCh == nil {
		return c.sleepOrView(ctx, d, nil)
	}
	end := time.Now().Add(d)
	for {
		if err := c.sleepOrView(ctx, time.Until(end), viewCh); err != nil {
			return err
		}
		if !isDone(viewCh) || !time.Now().Before(end) {
			return nil // slept d
		}
		if a, _ := c.masterAddr(hash); a != master {
			return nil
		}
		viewCh = c.viewChanged()
	}
}

// attempt sends m once: to target if set, else to the master of hash's
// group in the current view, with m's Redirects set to redirects. When that
// node cannot be reached (a dial failed just now or recently), it sends m
// through another node instead, with Redirects = wire.ForwardNow, and that
// node forwards it to the master (see wire.Routed). A nil error means a
// Response arrived; cn is set whenever the request was handed to a
// connection; master is the address m was meant for.
func (c *Client) attempt(ctx context.Context, stop <-chan struct{}, hash uint64, target string, typ wire.Type, m wire.Message, redirects int) (*wire.Response, *conn, string, error) {
	addr := target
	if addr == "" {
		a, ok := c.masterAddr(hash)
		if !ok {
			c.refreshWide()
			return nil, nil, "", ErrNoMaster
		}
		addr = a
	}
	rt, routed := m.(wire.Routed)
	if routed {
		rt.SetRedirectCount(uint8(min(redirects, wire.ForwardNow-1)))
	}
	var cn *conn
	err := ErrUnavailable
	if !routed || !c.unreachable(addr) {
		cn, err = c.getConn(ctx, addr)
	}
	if err != nil && routed && errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
		if rc := c.relayConn(ctx, addr); rc != nil {
			c.log.Debug("paxlock: master unreachable, sending through another node", "master", addr, "via", rc.addr)
			rt.SetRedirectCount(wire.ForwardNow)
			cn, err = rc, nil
		}
	}
	if err != nil {
		if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrClosed) {
			c.refresh()
		}
		return nil, nil, addr, err
	}
	rtyp, msg, err := cn.roundTrip(ctx, typ, m, c.cfg.RequestTimeout)
	switch {
	case err == nil:
	case errors.Is(err, errConnLost) && isDone(stop):
		return nil, cn, addr, ErrClosed
	case errors.Is(err, errConnLost), errors.Is(err, errAttemptTimeout), errors.Is(err, ErrOverloaded), ctx.Err() != nil:
		return nil, cn, addr, err
	default:
		return nil, cn, addr, fmt.Errorf("%w: %s: %w", ErrServer, cn.addr, err)
	}
	r, ok := msg.(*wire.Response)
	if !ok {
		return nil, cn, addr, fmt.Errorf("%w: unexpected %s reply from %s", ErrServer, rtyp, cn.addr)
	}
	return r, cn, addr, nil
}

// unreachable reports whether addr has no working connection and its last
// dial failed within the reconnect backoff, so that dialing it again now
// would only wait.
func (c *Client) unreachable(addr string) bool {
	// The request path's common case, a live connection, without c.mu.
	if m := c.connView.Load(); m != nil {
		if cn := (*m)[addr]; cn != nil && !cn.dead() {
			return false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn := c.conns[addr]; cn != nil && !cn.dead() {
		return false
	}
	f := c.dialFails[addr]
	return f.n > 0 && time.Since(f.last) < c.backoffCeil(f.n)
}

// relayConn returns a working connection to a node other than master, to
// relay a request through: the view subscription's, else any open one,
// else the first candidate that can be dialed. nil if there is none.
func (c *Client) relayConn(ctx context.Context, master string) *conn {
	c.mu.Lock()
	if cn := c.subConn; cn != nil && !cn.dead() && cn.addr != master {
		c.mu.Unlock()
		return cn
	}
	for a, cn := range c.conns {
		if a != master && !cn.dead() {
			c.mu.Unlock()
			return cn
		}
	}
	c.mu.Unlock()
	for _, a := range c.candidates() {
		if a == master || c.unreachable(a) {
			continue
		}
		if cn, err := c.getConn(ctx, a); err == nil {
			return cn
		}
	}
	return nil
}

// ctxErr wraps the context's error, mentioning the last retryable failure.
func ctxErr(op, key string, err, last error) error {
	if err == nil {
		err = context.Canceled
	}
	if last != nil {
		return fmt.Errorf("client: %s %q: %w (last: %v)", op, key, err, last)
	}
	return fmt.Errorf("client: %s %q: %w", op, key, err)
}

// ---- pushes ----

// onPush handles a server push; it runs on a connection's reader and never
// blocks.
func (c *Client) onPush(cn *conn, m wire.Message) {
	switch p := m.(type) {
	case *wire.Granted:
		c.onGranted(p)
	case *wire.Lost:
		c.onLost(p)
	case *wire.WatchEvent:
		c.onWatchEvent(cn, p)
	case *wire.View:
		if len(p.Groups) > 0 {
			c.updateView(p)
		}
	}
}

func (c *Client) onLost(p *wire.Lost) {
	if p.Owner.Client != c.id {
		return
	}
	c.mu.Lock()
	h := c.holds[holdKey{key: p.Key, token: p.Token, owner: p.Owner.ID}]
	c.mu.Unlock()
	if h == nil {
		return
	}
	err := fmt.Errorf("%w: %q (token %d): server says %s", ErrLockLost, p.Key, p.Token, p.Event)
	if p.Event == wire.EventRevoked {
		h.revoked(err)
		return
	}
	h.markLost(err, false)
}

func (c *Client) onGranted(g *wire.Granted) {
	if g.Owner.Client != c.id {
		return
	}
	c.mu.Lock()
	w := c.waits[g.WaitID]
	if w == nil {
		c.mu.Unlock()
		c.log.Debug("paxlock: grant for unknown wait", "wait", g.WaitID, "key", g.Key, "status", g.Status)
		return
	}
	if w.abandoned {
		delete(c.waits, g.WaitID)
		c.mu.Unlock()
		if g.Status != wire.StatusSuccess || !c.goClean(func() { w.core.releaseOrphan(w, g.Token) }) {
			c.unrefCore(w.core)
		}
		return
	}
	c.mu.Unlock()
	w.deliver(grant{status: g.Status, token: g.Token, ttlMs: g.TTLMs})
}
