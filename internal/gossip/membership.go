package gossip

import (
	"bytes"
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

// State is a member's state as this node sees it. It is a hint (see the
// package documentation).
type State uint8

// Member states.
const (
	// StateAlive: memberlist lists the member and this node's own probes
	// of it have been answered recently.
	StateAlive State = iota + 1
	// StateSuspect: memberlist still lists the member, but this node's
	// direct probes of it have not been answered for longer than
	// Timing.SuspectAfter. memberlist v0.7.0 keeps its own suspicion
	// private, so this is Membership's local heuristic: the member may be
	// slow, paused, or reachable only through other nodes. It often clears
	// by itself.
	StateSuspect
	// StateDead: memberlist declared the member failed (it stopped
	// answering, or crashed without leaving).
	StateDead
	// StateLeft: the member announced that it was leaving.
	StateLeft
)

// String returns alive, suspect, dead, left or State(N).
func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Live reports whether memberlist still counts the member: StateAlive or
// StateSuspect.
func (s State) Live() bool { return s == StateAlive || s == StateSuspect }

// Member is one node as this node's membership sees it. The embedded
// NodeMeta is the member's last gossiped metadata (zero if it did not
// decode; see MetaErr).
type Member struct {
	NodeMeta
	// Name is the member's unique memberlist name.
	Name string
	// GossipAddr is the member's memberlist address, ip:port.
	GossipAddr string
	// State is the member's state.
	State State
	// Since is when State last changed, on this node's clock.
	Since time.Time
	// Local marks this node's own entry.
	Local bool
	// MetaErr is the error decoding the member's metadata (a member of
	// another version or another program), or nil.
	MetaErr error
}

// EventKind says what changed in an Event.
type EventKind uint8

// Event kinds.
const (
	// EventJoin: a member appeared, or came back after it died or left.
	EventJoin EventKind = iota + 1
	// EventLeave: a member died (StateDead) or left (StateLeft).
	EventLeave
	// EventUpdate: a member's metadata or address changed, or it said it
	// is leaving (which may turn StateDead into StateLeft).
	EventUpdate
	// EventSuspect: a member became StateSuspect.
	EventSuspect
	// EventRecover: a suspect member answered again (StateAlive).
	EventRecover
)

// String returns join, leave, update, suspect, recover or EventKind(N).
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventRecover:
		return "recover"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one membership change, with the member as it was right after.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Member is the member after the change.
	Member Member
}

// Timing tunes the gossip and failure detection. Zero fields take the
// defaults of memberlist.DefaultLANConfig (and the defaults noted here).
type Timing struct {
	// ProbeInterval is how often a member probes another (LAN: 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack (LAN: 500ms).
	ProbeTimeout time.Duration
	// GossipInterval is how often a member gossips (LAN: 200ms).
	GossipInterval time.Duration
	// PushPullInterval is how often members exchange full state (LAN: 30s).
	PushPullInterval time.Duration
	// TCPTimeout bounds a TCP exchange, joins included (LAN: 10s).
	TCPTimeout time.Duration
	// SuspicionMult scales how long a member stays suspected before it is
	// declared dead (LAN: 4).
	SuspicionMult int
	// DeadNodeReclaim is how long after a member died its name may come
	// back on another address, as after a restart on a new port (default
	// 10s; memberlist's own default never allows it).
	DeadNodeReclaim time.Duration
	// RejoinInterval is how often a member re-joins configured seeds that
	// are not live members, which also merges the two sides of a healed
	// partition (default 15s).
	RejoinInterval time.Duration
	// SuspectAfter marks a live member StateSuspect when this node's
	// direct probes have not been answered for this long (default: enough
	// probe rounds that a healthy member is always probed first, scaled by
	// memberlist's local health score).
	SuspectAfter time.Duration
	// DeadRetention is how long Members keeps reporting a dead or left
	// member (default 10m).
	DeadRetention time.Duration
}

// FastTiming returns timings for tests and single-host development: fast
// probes and gossip so that a few members on loopback converge in well
// under a second. Do not use it in production; under CPU starvation it
// declares healthy nodes dead.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:    100 * time.Millisecond,
		ProbeTimeout:     50 * time.Millisecond,
		GossipInterval:   20 * time.Millisecond,
		PushPullInterval: 2 * time.Second,
		TCPTimeout:       2 * time.Second,
		SuspicionMult:    3,
		DeadNodeReclaim:  200 * time.Millisecond,
		RejoinInterval:   500 * time.Millisecond,
		DeadRetention:    time.Minute,
	}
}

// MembershipConfig configures a Membership.
type MembershipConfig struct {
	// NodeID is this node's id, nonzero. It is put in the metadata.
	NodeID uint32
	// Name is this node's memberlist name, unique in the cluster
	// (default DefaultName(NodeID)). memberlist's own default, the host
	// name, collides when several members share a host.
	Name string
	// Bind is the gossip address, host:port, for both TCP and UDP. Port 0
	// picks a free port (read it back with GossipAddr).
	Bind string
	// Advertise is the address other members reach this one at, if it
	// differs from Bind (NAT, or Bind on 0.0.0.0). Optional.
	Advertise string
	// Seeds are gossip addresses of other members to join. Start keeps
	// re-joining any that is not a live member every RejoinInterval.
	Seeds []string
	// Label names the cluster; members with different labels ignore each
	// other, so two clusters on one network never merge. Optional but
	// recommended (at most 255 bytes).
	Label string
	// SecretKey, if set, encrypts gossip with AES-GCM: 16, 24 or 32 bytes,
	// the same on every member. Members without it, or with another key,
	// cannot join or read the gossip.
	SecretKey []byte
	// OldSecretKeys are more keys (same sizes) that received gossip may be
	// encrypted with; SecretKey alone encrypts. They let a cluster rotate
	// its key with rolling restarts: every member first accepts the new
	// key, then switches to it, then drops the old one. Optional; ignored
	// without SecretKey.
	OldSecretKeys [][]byte
	// Meta provides this node's initial metadata; Start calls it once.
	// Later changes go through UpdateMeta. Optional.
	Meta func() NodeMeta
	// OnEvent, if set, receives every change in memberlist's order, on a
	// goroutine of its own (never inside memberlist's callbacks), so it may
	// call Members and even UpdateMeta. Later events wait while it runs, so
	// it should be quick; Shutdown waits for it to return.
	OnEvent func(Event)
	// Logger receives Membership's and memberlist's logs (default
	// slog.Default()).
	Logger *slog.Logger
	// Timing tunes failure detection; the zero value is memberlist's LAN
	// profile.
	Timing Timing
}

// DefaultName returns the memberlist name of node id: "paxlock-<id>".
func DefaultName(id uint32) string { return "paxlock-" + strconv.FormatUint(uint64(id), 10) }

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

	sem   chan struct{} // serializes Start, UpdateMeta, Leave, Shutdown
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

func withTimingDefaults(t Timing) Timing {
	lan := memberlist.DefaultLANConfig()
	defaultDuration(&t.ProbeInterval, lan.ProbeInterval)
	defaultDuration(&t.ProbeTimeout, lan.ProbeTimeout)
	defaultDuration(&t.GossipInterval, lan.GossipInterval)
	defaultDuration(&t.PushPullInterval, lan.PushPullInterval)
	defaultDuration(&t.TCPTimeout, lan.TCPTimeout)
	if t.SuspicionMult <= 0 {
		t.SuspicionMult = lan.SuspicionMult
	}
	defaultDuration(&t.DeadNodeReclaim, 10*time.Second)
	defaultDuration(&t.RejoinInterval, 15*time.Second)
	defaultDuration(&t.DeadRetention, 10*time.Minute)
	return t
}

// defaultDuration sets *d to v when it is unset (zero or negative).
func defaultDuration(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

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

// acquire takes the operation slot, or gives up when ctx ends or Shutdown
// begins (so that OnEvent may call UpdateMeta without deadlocking a
// Shutdown that waits for it).
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

// Leave announces that this node is leaving, so that the others mark it
// StateLeft at once rather than detecting a failure. It gossips metadata
// with Leaving set, tells every live member directly over TCP, then sends
// memberlist's leave message, and waits until that went out or ctx ends
// (5s if ctx has no deadline). Call Shutdown afterwards. Leave stops the
// re-joining of seeds.
func (m *Membership) Leave(ctx context.Context) error {
	if err := m.acquire(ctx); err != nil {
		return err
	}
	if m.phase.Load() != phaseRunning {
		m.release()
		return ErrNotRunning
	}
	m.phase.Store(phaseLeft)
	m.metaMu.Lock()
	meta := m.meta
	m.meta.Leaving = true
	m.metaMu.Unlock()
	if _, err := m.setMeta(meta); err != nil {
		m.log.Warn("membership: cannot mark metadata as leaving", "err", err)
	}
	ml := m.ml.Load()
	return m.runOp(ctx, func(timeout time.Duration) error {
		start := time.Now()
		if err := ml.UpdateNode(timeout / 3); err != nil {
			m.log.Debug("membership: leaving flag not broadcast", "err", err)
		}
		m.announceLeaving(ml, timeout/3)
		if err := ml.Leave(max(timeout-time.Since(start), time.Millisecond)); err != nil {
			return fmt.Errorf("gossip: membership: leave: %w", err)
		}
		m.log.Info("membership left", "name", m.cfg.Name)
		return nil
	})
}

// User messages between Memberships: a version byte, a kind byte, then
// the kind's body.
const (
	userMsgVersion = 1
	// userMsgLeaving's body is the sender's memberlist name.
	userMsgLeaving = 1
)

// announceLeaving tells every other live member, over TCP, that this node
// is leaving. Gossip alone does not order the Leaving metadata before
// memberlist's leave message (a member may hear the leave first, from a
// relay, and then drop the older metadata), so a member could not tell a
// leave from a crash; the direct message lets it, in either order. It
// waits at most timeout.
func (m *Membership) announceLeaving(ml *memberlist.Memberlist, timeout time.Duration) {
	msg := append([]byte{userMsgVersion, userMsgLeaving}, m.cfg.Name...)
	// The addresses come from Membership's own table: the *Node values
	// memberlist.Members returns point into its state and are written
	// under its lock after Members returns, so reading them races.
	var peers []memberlist.Node
	m.mu.Lock()
	for _, r := range m.members {
		if r.local || !r.state.Live() {
			continue
		}
		host, port, err := splitHostPort(r.addr)
		if ip := net.ParseIP(host); err == nil && ip != nil {
			peers = append(peers, memberlist.Node{Name: r.name, Addr: ip, Port: uint16(port)})
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, node := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ml.SendReliable(&node, msg); err != nil {
				m.log.Debug("membership: leaving notice not delivered", "member", node.Name, "err", err)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// userMsg handles a message from another Membership. It runs on
// memberlist's receive path: it must not block or call memberlist.
func (m *Membership) userMsg(b []byte) {
	if len(b) < 2 || b[0] != userMsgVersion || b[1] != userMsgLeaving || len(b) > 2+MaxAddrLen {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[string(b[2:])]
	if r == nil || r.local || r.leaving {
		return
	}
	r.leaving = true
	if r.state == StateDead {
		// memberlist's leave message overtook the notice.
		r.state, r.since = StateLeft, now
	}
	m.notifyLocked(Event{Kind: EventUpdate, Member: r.member()})
}

// Shutdown stops memberlist and Membership's goroutines and closes every
// subscription channel. Without a Leave first, the others detect this node
// as failed (StateDead) after their probes time out. It waits for an
// UpdateMeta or Leave in progress. Safe to call more than once.
func (m *Membership) Shutdown() error {
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

// Subscribe returns a channel that receives a value after membership
// changes: a join, a leave, a metadata update, a member turning suspect or
// recovering. Signals coalesce (the channel holds one), so a receiver reads
// Members after each and never misses the latest state. The channel is
// closed by cancel or by Shutdown. Receivers must not assume a signal
// means anything changed that they care about.
func (m *Membership) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.phase.Load() == phaseShut {
		m.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			m.mu.Lock()
			if _, ok := m.subs[ch]; ok {
				delete(m.subs, ch)
				close(ch)
			}
			m.mu.Unlock()
		})
	}
}

// notifyLocked queues ev and signals the dispatcher and subscribers. m.mu
// is held; nothing here blocks.
func (m *Membership) notifyLocked(ev Event) {
	m.queue = append(m.queue, ev)
	select {
	case m.kick <- struct{}{}:
	default:
	}
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// observe records what a memberlist callback reported. It runs under
// memberlist's node lock: it must not call memberlist or block.
func (m *Membership) observe(kind EventKind, n *memberlist.Node) {
	if n == nil {
		return
	}
	addr := n.Address()
	raw := bytes.Clone(n.Meta)
	meta, merr := DecodeMeta(raw)
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[n.Name]
	if r == nil {
		r = &memberRec{name: n.Name, local: n.Name == m.cfg.Name}
		m.members[n.Name] = r
	}
	switch kind {
	case EventJoin:
		r.state, r.since, r.aliveSince, r.leaving = StateAlive, now, now, false
	case EventUpdate:
		if r.state.Live() && r.addr == addr && bytes.Equal(r.raw, raw) {
			return
		}
		if !r.state.Live() {
			// An update for a member we saw leave: treat it as a join.
			kind = EventJoin
			r.state, r.since, r.aliveSince, r.leaving = StateAlive, now, now, false
		}
	case EventLeave:
		r.state, r.since = StateDead, now
		if r.leaving || (merr == nil && meta.Leaving) || (r.metaErr == nil && r.meta.Leaving) {
			r.state = StateLeft
		}
	}
	r.addr, r.raw, r.meta, r.metaErr = addr, raw, meta, merr
	m.notifyLocked(Event{Kind: kind, Member: r.member()})
}

// dispatch delivers queued events to the log and OnEvent, and re-checks
// suspicion every probe interval.
func (m *Membership) dispatch() {
	defer m.wg.Done()
	tick := time.NewTicker(m.timing.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-tick.C:
			m.checkSuspects()
		}
		m.mu.Lock()
		q := m.queue
		m.queue = nil
		m.mu.Unlock()
		for _, ev := range q {
			lvl := slog.LevelInfo
			if ev.Kind == EventUpdate {
				lvl = slog.LevelDebug
			}
			m.log.Log(context.Background(), lvl, "membership: "+ev.Kind.String(), "member", ev.Member.Name,
				"id", ev.Member.ID, "gossip", ev.Member.GossipAddr, "state", ev.Member.State)
			if m.cfg.OnEvent != nil {
				m.cfg.OnEvent(ev)
			}
		}
	}
}

// suspectAfter is how long a live member may go without answering this
// node's direct probes before it counts as suspect. memberlist probes one
// member per interval in a shuffled round-robin, so a given member is
// probed at least once every 2*peers intervals; the interval stretches by
// the local health score under load.
func (m *Membership) suspectAfter(peers, health int) time.Duration {
	if m.timing.SuspectAfter > 0 {
		return m.timing.SuspectAfter
	}
	return m.timing.ProbeTimeout + m.timing.ProbeInterval*time.Duration((health+1)*(2*peers+2))
}

// checkSuspects moves live members between StateAlive and StateSuspect and
// forgets dead ones after DeadRetention. It calls memberlist only outside
// m.mu.
func (m *Membership) checkSuspects() {
	health := 0
	if ml := m.ml.Load(); ml != nil {
		health = ml.GetHealthScore()
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	peers := 0
	for _, r := range m.members {
		if !r.local && r.state.Live() {
			peers++
		}
	}
	limit := m.suspectAfter(peers, health)
	for name, r := range m.members {
		if !r.state.Live() {
			if now.Sub(r.since) > m.timing.DeadRetention {
				delete(m.members, name)
			}
			continue
		}
		if r.local {
			continue
		}
		last := r.aliveSince
		if r.lastAck.After(last) {
			last = r.lastAck
		}
		want := StateAlive
		if now.Sub(last) > limit {
			want = StateSuspect
		}
		if want == r.state {
			continue
		}
		r.state, r.since = want, now
		kind := EventSuspect
		if want == StateAlive {
			kind = EventRecover
		}
		m.notifyLocked(Event{Kind: kind, Member: r.member()})
	}
}

// rejoin joins every configured seed that is not a live member, at once
// and then every RejoinInterval, until Leave or Shutdown.
func (m *Membership) rejoin() {
	defer m.wg.Done()
	if len(m.cfg.Seeds) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if m.phase.Load() != phaseRunning {
			return
		}
		if missing := m.missingSeeds(ctx); len(missing) > 0 {
			if ml := m.ml.Load(); ml != nil {
				n, err := ml.Join(missing)
				if n > 0 {
					m.log.Debug("membership: joined seeds", "seeds", missing, "answered", n)
				} else {
					m.log.Debug("membership: seeds not reachable", "seeds", missing, "err", err)
				}
			}
		}
		t.Reset(m.timing.RejoinInterval)
	}
}

// missingSeeds returns the configured seeds that are neither this node nor
// a live member. Host names are resolved; one that does not resolve counts
// as missing.
func (m *Membership) missingSeeds(ctx context.Context) []string {
	live := map[string]bool{m.GossipAddr(): true}
	m.mu.Lock()
	for _, r := range m.members {
		if r.state.Live() {
			live[r.addr] = true
		}
	}
	m.mu.Unlock()
	var out []string
	for _, s := range m.cfg.Seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			out = append(out, s)
			continue
		}
		var ips []string
		if ip := net.ParseIP(host); ip != nil {
			ips = []string{ip.String()}
		} else {
			rctx, cancel := context.WithTimeout(ctx, m.timing.TCPTimeout)
			addrs, err := net.DefaultResolver.LookupHost(rctx, host)
			cancel()
			if err == nil {
				ips = addrs
			}
		}
		found := false
		for _, ip := range ips {
			if live[net.JoinHostPort(ip, port)] {
				found = true
				break
			}
		}
		if !found {
			out = append(out, s)
		}
	}
	return out
}

// mlDelegate is memberlist.Delegate: it serves this node's metadata and
// takes the leaving notices of others.
type mlDelegate Membership

// NodeMeta implements memberlist.Delegate. It returns bytes encoded ahead
// of time and never more than limit (memberlist panics beyond it).
func (d *mlDelegate) NodeMeta(limit int) []byte {
	m := (*Membership)(d)
	m.metaMu.Lock()
	b := m.metaBytes
	m.metaMu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg implements memberlist.Delegate: it takes the leaving notices
// of other members.
func (d *mlDelegate) NotifyMsg(b []byte) { (*Membership)(d).userMsg(b) }

// GetBroadcasts implements memberlist.Delegate; Membership has none.
func (d *mlDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate; Membership has no extra state.
func (d *mlDelegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (d *mlDelegate) MergeRemoteState(buf []byte, join bool) {}

// mlEvents is memberlist.EventDelegate.
type mlEvents Membership

// NotifyJoin implements memberlist.EventDelegate.
func (e *mlEvents) NotifyJoin(n *memberlist.Node) { (*Membership)(e).observe(EventJoin, n) }

// NotifyLeave implements memberlist.EventDelegate.
func (e *mlEvents) NotifyLeave(n *memberlist.Node) { (*Membership)(e).observe(EventLeave, n) }

// NotifyUpdate implements memberlist.EventDelegate.
func (e *mlEvents) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).observe(EventUpdate, n) }

// mlPing is memberlist.PingDelegate: it records direct probe acks, the
// input of the StateSuspect heuristic.
type mlPing Membership

// AckPayload implements memberlist.PingDelegate.
func (p *mlPing) AckPayload() []byte { return nil }

// NotifyPingComplete implements memberlist.PingDelegate.
func (p *mlPing) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if other == nil {
		return
	}
	m := (*Membership)(p)
	now := time.Now()
	m.mu.Lock()
	if r := m.members[other.Name]; r != nil {
		r.lastAck = now
	}
	m.mu.Unlock()
}

// mlConflict is memberlist.ConflictDelegate: it logs two members claiming
// one name, which memberlist resolves by refusing the newcomer.
type mlConflict Membership

// NotifyConflict implements memberlist.ConflictDelegate.
func (c *mlConflict) NotifyConflict(existing, other *memberlist.Node) {
	if existing == nil || other == nil {
		return
	}
	(*Membership)(c).log.Warn("membership: name conflict: two members claim one name (names must be unique)",
		"name", existing.Name, "existing", existing.Address(), "other", other.Address())
}
