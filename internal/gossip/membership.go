package gossip

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Membership errors.
var (
	// ErrNotRunning reports an operation on a Membership that was not
	// started, or already left or shut down.
	ErrNotRunning = errors.New("gossip: membership not running")
	// ErrJoin reports that no seed could be joined.
	ErrJoin = errors.New("gossip: join failed")
)

// defaultOpTimeout bounds UpdateMeta and Leave when their context has no
// deadline: memberlist waits for a broadcast with a timeout, not a context.
const defaultOpTimeout = 5 * time.Second

const (
	phaseNew int32 = iota
	phaseRunning
	phaseLeft
	phaseShut
)

// Membership is one node's view of its cluster's members, over
// hashicorp/memberlist. It is a hint for discovery and placement, never a
// safety signal: see the package documentation.
//
// Membership never calls into memberlist from memberlist's callbacks (which
// run under memberlist's node lock, so such a call deadlocks). The
// callbacks only update Membership's own table and signal subscribers;
// Members reads that table and never touches memberlist. All methods are
// safe for concurrent use.
type Membership struct {
	cfg    MembershipConfig
	log    *slog.Logger
	timing Timing

	sem   chan struct{} // serializes Start, UpdateMeta, Leave, Stop
	phase atomic.Int32
	ml    atomic.Pointer[memberlist.Memberlist]
	addr  atomic.Pointer[string]

	metaMu    sync.Mutex
	meta      NodeMeta
	metaBytes []byte

	// mu guards the table, the event queue and the subscribers. It is
	// taken inside memberlist's callbacks: never call memberlist with it
	// held.
	mu      sync.Mutex
	members map[string]*memberRec
	queue   []Event
	subs    map[chan struct{}]struct{}

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

type memberRec struct {
	name       string
	addr       string
	raw        []byte
	meta       NodeMeta
	metaErr    error
	state      State
	since      time.Time
	aliveSince time.Time
	lastAck    time.Time
	local      bool
	leaving    bool // the member said so in a direct message
}

func (r *memberRec) member() Member {
	m := Member{NodeMeta: r.meta, Name: r.name, GossipAddr: r.addr, State: r.state, Since: r.since, Local: r.local, MetaErr: r.metaErr}
	m.Groups = slices.Clone(r.meta.Groups)
	m.Leaving = r.meta.Leaving || r.leaving
	return m
}

// NewMembership checks cfg and returns a Membership that Start will open.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if cfg.NodeID == 0 {
		return nil, fmt.Errorf("gossip: membership: node id must be nonzero")
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName(cfg.NodeID)
	}
	if _, _, err := splitHostPort(cfg.Bind); err != nil {
		return nil, fmt.Errorf("gossip: membership: bind %q: %w", cfg.Bind, err)
	}
	if cfg.Advertise != "" {
		if _, _, err := splitHostPort(cfg.Advertise); err != nil {
			return nil, fmt.Errorf("gossip: membership: advertise %q: %w", cfg.Advertise, err)
		}
	}
	for _, k := range append([][]byte{cfg.SecretKey}, cfg.OldSecretKeys...) {
		switch len(k) {
		case 0, 16, 24, 32:
		default:
			return nil, fmt.Errorf("gossip: membership: secret key must be 16, 24 or 32 bytes, not %d", len(k))
		}
	}
	if len(cfg.Label) > memberlist.LabelMaxSize {
		return nil, fmt.Errorf("gossip: membership: label longer than %d bytes", memberlist.LabelMaxSize)
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Membership{
		cfg:     cfg,
		log:     log.With("node", cfg.NodeID),
		timing:  withTimingDefaults(cfg.Timing),
		sem:     make(chan struct{}, 1),
		members: map[string]*memberRec{},
		subs:    map[chan struct{}]struct{}{},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	m.meta = NodeMeta{ID: cfg.NodeID}
	b, _, err := EncodeMeta(m.meta)
	if err != nil {
		return nil, err
	}
	m.metaBytes = b
	return m, nil
}

// acquire takes the operation slot, or gives up when ctx ends or Stop
// begins (so that OnEvent may call UpdateMeta without deadlocking a
// Stop that waits for it).
func (m *Membership) acquire(ctx context.Context) error {
	select {
	case m.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gossip: membership: %w", ctx.Err())
	case <-m.stop:
		return ErrNotRunning
	}
}

func (m *Membership) release() { <-m.sem }

// Start binds the gossip address and starts memberlist and Membership's
// background work: delivering events and re-joining the configured seeds
// (the first attempt at once). It does not wait for a join; call Join for
// that. Start may be called once.
func (m *Membership) Start(ctx context.Context) error {
	if err := m.acquire(ctx); err != nil {
		return err
	}
	defer m.release()
	if m.phase.Load() != phaseNew {
		return fmt.Errorf("gossip: membership: already started")
	}
	if m.cfg.Meta != nil {
		meta := m.cfg.Meta()
		if _, err := m.setMeta(meta); err != nil {
			return err
		}
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = m.cfg.Name
	host, port, _ := splitHostPort(m.cfg.Bind)
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = "", port
	if m.cfg.Advertise != "" {
		ah, ap, _ := splitHostPort(m.cfg.Advertise)
		mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
	}
	mc.Label = m.cfg.Label
	if len(m.cfg.SecretKey) > 0 {
		keys := [][]byte{m.cfg.SecretKey}
		for _, k := range m.cfg.OldSecretKeys {
			if len(k) > 0 {
				keys = append(keys, k)
			}
		}
		kr, err := memberlist.NewKeyring(keys, m.cfg.SecretKey)
		if err != nil {
			return fmt.Errorf("gossip: membership: keyring: %w", err)
		}
		mc.Keyring = kr
	}
	t := m.timing
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.GossipInterval = t.GossipInterval
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	mc.SuspicionMult = t.SuspicionMult
	mc.DeadNodeReclaimTime = t.DeadNodeReclaim
	mc.Delegate = (*mlDelegate)(m)
	mc.Events = (*mlEvents)(m)
	mc.Ping = (*mlPing)(m)
	mc.Conflict = (*mlConflict)(m)
	mc.Logger = memberlistLogger(m.log)
	mc.LogOutput = nil

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gossip: membership: %w", err)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("gossip: membership: start %s on %s: %w", m.cfg.Name, m.cfg.Bind, err)
	}
	// This node's address as memberlist advertises it, from the join
	// event Create delivered (the *Node that LocalNode returns is written
	// under memberlist's lock after it returns: reading it races).
	m.mu.Lock()
	var addr string
	if r := m.members[m.cfg.Name]; r != nil {
		addr = r.addr
	}
	m.mu.Unlock()
	if addr == "" {
		addr = net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.AdvertisePort))
	}
	m.addr.Store(&addr)
	m.ml.Store(ml)
	m.phase.Store(phaseRunning)
	m.wg.Add(2)
	go m.dispatch()
	go m.rejoin()
	m.log.Info("membership started", "name", m.cfg.Name, "gossip", addr, "seeds", m.cfg.Seeds)
	return nil
}

// GossipAddr returns the address other members reach this one at, ip:port,
// with the port memberlist bound when Bind asked for port 0. It is empty
// before Start.
func (m *Membership) GossipAddr() string {
	if p := m.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Name returns this node's memberlist name.
func (m *Membership) Name() string { return m.cfg.Name }

// Join contacts seeds (gossip addresses, host:port) and merges state with
// every one that answers. It retries, with a growing pause, until at least
// one answers or ctx ends, and returns how many answered in the successful
// round. Each attempt is bounded by Timing.TCPTimeout per seed.
func (m *Membership) Join(ctx context.Context, seeds []string) (int, error) {
	if len(seeds) == 0 {
		return 0, fmt.Errorf("%w: no seeds", ErrJoin)
	}
	pause := 50 * time.Millisecond
	for {
		ml := m.ml.Load()
		if ml == nil || m.phase.Load() != phaseRunning {
			return 0, ErrNotRunning
		}
		n, err := ml.Join(seeds)
		if n > 0 {
			return n, nil
		}
		m.log.Debug("membership: join failed, retrying", "seeds", seeds, "err", err, "pause", pause)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %v: %w", ErrJoin, seeds, errors.Join(ctx.Err(), err))
		case <-m.stop:
			return 0, ErrNotRunning
		case <-time.After(pause):
		}
		pause = min(pause*2, 2*time.Second)
	}
}

// Members returns every member this node knows, itself included, sorted by
// node id then name: live ones, and dead or left ones for
// Timing.DeadRetention. It reads Membership's own table, never memberlist,
// so it is safe anywhere, OnEvent included.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, r := range m.members {
		out = append(out, r.member())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Meta returns this node's current metadata.
func (m *Membership) Meta() NodeMeta {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	meta := m.meta
	meta.Groups = slices.Clone(meta.Groups)
	return meta
}

// setMeta encodes meta (with this node's id and leaving flag) and makes it
// what memberlist will gossip; it reports whether the groups were dropped.
func (m *Membership) setMeta(meta NodeMeta) (bool, error) {
	m.metaMu.Lock()
	meta.ID = m.cfg.NodeID
	meta.Leaving = m.meta.Leaving
	meta.Groups = slices.Clone(meta.Groups)
	b, truncated, err := EncodeMeta(meta)
	if err != nil {
		m.metaMu.Unlock()
		return false, fmt.Errorf("gossip: membership: %w", err)
	}
	meta.GroupsTruncated = truncated
	groups := len(meta.Groups)
	if truncated {
		meta.Groups = nil
	}
	m.meta, m.metaBytes = meta, b
	m.metaMu.Unlock()
	if truncated {
		m.log.Warn("membership: metadata too large, gossiping it without the group list", "groups", groups, "limit", MaxMetaSize)
	}
	return truncated, nil
}

// UpdateMeta replaces this node's metadata (its ID is always the
// configured one) and gossips it: memberlist re-announces this node and
// every member's NotifyUpdate fires. It waits until the update went out to
// at least one member, or until ctx ends (5s if ctx has no deadline). A list
// of groups too long for MaxMetaSize is dropped and GroupsTruncated set;
// addresses too long give ErrMetaTooLarge and change nothing.
//
// When to call it: whenever the set of groups this node masters, or their
// epochs, change. Calls are cheap but each one is a gossip broadcast; the
// caller may coalesce bursts.
func (m *Membership) UpdateMeta(ctx context.Context, meta NodeMeta) error {
	if err := m.acquire(ctx); err != nil {
		return err
	}
	if m.phase.Load() != phaseRunning {
		m.release()
		return ErrNotRunning
	}
	if _, err := m.setMeta(meta); err != nil {
		m.release()
		return err
	}
	ml := m.ml.Load()
	return m.runOp(ctx, func(timeout time.Duration) error {
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("gossip: membership: update metadata: %w", err)
		}
		return nil
	})
}

// runOp runs fn, which may block in memberlist for up to the timeout it is
// given, on a goroutine that releases the operation slot when fn returns,
// and waits for it or for ctx. The caller holds the slot.
func (m *Membership) runOp(ctx context.Context, fn func(timeout time.Duration) error) error {
	timeout := defaultOpTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		defer m.release()
		done <- fn(timeout)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("gossip: membership: %w", ctx.Err())
	}
}

// Stop stops memberlist and Membership's goroutines (Start's loop) and
// closes every subscription channel. Without a Leave first, the others detect this node
// as failed (StateDead) after their probes time out. It waits for an
// UpdateMeta or Leave in progress. Safe to call more than once.
func (m *Membership) Stop() error {
	m.sem <- struct{}{}
	defer m.release()
	prev := m.phase.Swap(phaseShut)
	if prev == phaseShut {
		return nil
	}
	var err error
	if prev != phaseNew {
		close(m.stop)
		if ml := m.ml.Load(); ml != nil {
			if e := ml.Shutdown(); e != nil {
				err = fmt.Errorf("gossip: membership: shutdown: %w", e)
			}
		}
		m.wg.Wait()
	}
	m.mu.Lock()
	for ch := range m.subs {
		close(ch)
	}
	m.subs = map[chan struct{}]struct{}{}
	m.mu.Unlock()
	return err
}
