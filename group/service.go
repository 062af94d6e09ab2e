package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
)

// Op is what a Request asks for.
type Op uint8

// Request operations.
const (
	OpAcquire Op = iota + 1
	OpRenew
	OpRelease
	OpState
	OpWatch
	OpUnwatch
	OpCancelWait
	// OpForceRelease frees the key's first hold whoever holds it (an
	// operator's force-unlock; see Service.ForceRelease). The answer
	// names the removed hold (Holder, Token), or is LOCK_DELETED when the
	// key is free.
	OpForceRelease
	// OpMultiAcquire takes exclusive locks on several keys of one group
	// in one Paxos command, all or none (Service.SubmitMulti).
	OpMultiAcquire
)

// Sink receives what the service says about one client connection's
// requests. Both methods must return at once (queue, don't write).
type Sink interface {
	// Respond answers the request with id reqID.
	Respond(reqID uint64, r wire.Response)
	// Push delivers an event: *wire.Granted, *wire.Lost or *wire.WatchEvent.
	Push(m wire.Message)
}

// Request is one client request for a key.
type Request struct {
	Op Op
	// LockDelayMs is an acquire's lock-delay in milliseconds, or that of
	// a release's pass-on grant (see PassOn; at most
	// wire.MaxLockDelayMs; see lockdelay.go). A
	// uint16 in what would be
	// padding, which keeps Request in its allocation size class.
	LockDelayMs uint16
	// Limit is a semaphore acquire's total, Permits (below) the permits
	// it takes (wire.Acquire), or on a release the permits the semaphore
	// hold keeps (a partial release, wire.Release.KeepPermits; 0: the
	// whole hold goes; see permits.go). Both sit in what would be padding, which
	// keeps Request in its allocation size class.
	Limit uint32
	// Namespace and Key name the lock; Hash is wire.KeyHash(Namespace, Key).
	Namespace string
	Key       string
	Hash      uint64
	Owner     wire.Owner
	Kind      wire.Kind
	Flags     wire.Flags
	Weight    uint8
	// SetValue: a renew sets the hold's value to Value.
	SetValue bool
	Permits  uint32
	// MaxHoldMs is an acquire's maximum hold time in milliseconds (at
	// most wire.MaxHoldLimitMs; 0: none; see maxhold.go).
	MaxHoldMs uint32
	// WaitedMs is how long a re-sent blocking acquire has already waited
	// at an earlier master, in milliseconds (wire.Acquire.WaitedMs): it
	// queues as if it had arrived that much before it came, keeping the
	// weight-then-arrival order it had there. Milliseconds in a uint32
	// beside MaxHoldMs keep Request in its allocation size class.
	WaitedMs uint32
	// TTL is the lock's TTL (0: the default).
	TTL time.Duration
	// MaxWait is how long an acquire may wait (0: try-lock; negative: no
	// limit) or how long a watch lives (0 or negative: no limit).
	MaxWait time.Duration
	// Token is the holder's token (renew, release), the watcher's last
	// seen token (watch), or the token a state query asks about (state:
	// a token check, wire.State.Token).
	Token uint64
	// Value is the holder value an acquire attaches, or a renew sets when
	// SetValue is true (at most wire.MaxValueLen bytes).
	Value string
	// PassOn, when not zero, is the owner a release hands the lock on to
	// (wire.Release.PassOnID: the releasing client's next local waiter):
	// granted in the same command, with TTL, Value and LockDelayMs, if
	// the key is then free and nobody is queued for it. This is what a
	// pass-on; a freed key's grant to queued waiters is a grant, and a
	// hand-off is only the move of a group's mastership to its preferred
	// node (paxos).
	PassOn wire.Owner
	// WaitID names a blocking acquire's wait, WatchID a watch.
	WaitID  uint64
	WatchID uint64
	// ReqID is echoed to Sink.Respond.
	ReqID uint64
	Sink  Sink
	// Start, when not 0, is when the request arrived (Nanotime): its
	// answer tells Config.Observer how long it took. An int64 rather than
	// a time.Time keeps Request in its allocation size class.
	Start int64
	// Trace, when not nil, follows the request for tracing (trace.go).
	Trace *Trace
}

// nanoBase is the origin of Nanotime.
var nanoBase = time.Now()

// Nanotime returns the time since the process started the package, in
// nanoseconds on the monotonic clock (never 0): Request.Start's clock.
func Nanotime() int64 { return int64(time.Since(nanoBase)) | 1 }

// Stat names a lock service event that Observer.Count counts.
type Stat uint8

// The events Observer.Count counts.
const (
	// StatGrant: a lock granted by this master (an acquire, or a waiter
	// handed the key).
	StatGrant Stat = iota
	// StatRelease: a hold released by its holder.
	StatRelease
	// StatExpiry: a hold expired (its TTL passed unrenewed).
	StatExpiry
	// StatRenewal: a hold renewed.
	StatRenewal
	// StatElectionWon: this node became a group's master by election.
	StatElectionWon
	// StatMasterTransfer: this node took a group over as its preferred
	// master (a mastership transfer; counted by the node that takes it,
	// so once per transfer).
	StatMasterTransfer
	// StatMasterChange: a group's master, as this node sees it, changed
	// (to another node or to none).
	StatMasterChange
	// StatLeaseLoss: this node stopped serving a group it mastered
	// without transferring it (its lease was not renewed, or it lost the
	// mastership to another ballot).
	StatLeaseLoss
	// StatHoldLimit: this master ended a hold that reached its maximum
	// hold time (see maxhold.go).
	StatHoldLimit
	// NumStats is the number of Stat values.
	NumStats
)

// Observer is told of the lock service's events, for metrics (package
// server turns them into Prometheus metrics; group has no metrics
// dependency). Its methods run on the workers and on the paxos host's
// loop, concurrently: they must be safe for that, return at once and not
// allocate.
type Observer interface {
	// Responded: a request with a Start was answered with status st,
	// d after it started.
	Responded(op Op, st wire.Status, d time.Duration)
	// Waited: a blocked acquire was granted d after it joined the key's
	// queue.
	Waited(d time.Duration)
	// Released: a hold released by its holder had been held for d (since
	// its grant, or since this node became the group's master if that was
	// later; within 0.1 % or 1 ms).
	Released(d time.Duration)
	// Count counts one event.
	Count(ev Stat)
}

// Config configures a Service.
type Config struct {
	// Groups is the number of lock groups (default 15).
	Groups int
	// Workers is the number of workers per group (default 8).
	Workers int
	// DefaultTTL, MinTTL and MaxTTL bound lock TTLs (defaults 30s, 1s, 24h).
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// MaxWaiters bounds the waiters of one key (default 10000).
	MaxWaiters int
	// MaxHoldersPerKey bounds the holders of one key (the readers of a
	// read lock, the holders of a semaphore; default 1024); MaxWaited
	// the time a re-sent wait may claim it has waited (Request.WaitedMs;
	// default 10m). See limits.go.
	MaxHoldersPerKey int
	MaxWaited        time.Duration
	// MaxConnWaits and MaxConnWatches bound the blocked acquires and the
	// watches that one client connection (one Sink) may keep on this
	// node's masters, across keys and groups (defaults 10000 each);
	// MaxNamespaceWaits and MaxNamespaceWatches bound those of one
	// namespace, all connections together (defaults 100000 each). A
	// blocked acquire or a watch beyond a bound is answered OVERLOADED
	// with RetryAfterMs, and nothing is kept for it. A wait re-sent over
	// a new connection (the same owner and wait id) moves there whatever
	// that connection holds: it is the same wait, not a new one.
	MaxConnWaits, MaxConnWatches           int
	MaxNamespaceWaits, MaxNamespaceWatches int
	// MaxConnPrefixWatches and MaxNamespacePrefixWatches bound the prefix
	// watches (wire.FlagPrefix) one connection and one namespace may keep
	// on this node's masters, counted once per group registered with
	// (defaults DefaultMaxConnPrefixWatches, DefaultMaxNamespacePrefixWatches):
	// beyond one, a prefix watch is answered OVERLOADED.
	MaxConnPrefixWatches, MaxNamespacePrefixWatches int
	// WeightAging is how much waiting time one unit of a waiter's weight
	// is worth (default 1s): a key's waiters are served in order of
	// arrival time minus weight × WeightAging, earliest first. A heavier
	// waiter therefore overtakes a lighter one that arrived at most
	// (difference of weights) × WeightAging before it, and a waiter is
	// never overtaken by one that arrives more than (wire.MaxWeight −
	// wire.MinWeight) × WeightAging after it: weights order the queue
	// without starving anyone.
	WeightAging time.Duration
	// Clock is the monotonic clock for deadlines (default: the real one).
	Clock Clock
	// Logger receives events (default slog.Default()).
	Logger *slog.Logger
	// Self is this node's id (default: the paxos.Config's ID); the logs
	// of mastership changes need it to say when this node became or
	// stopped being a group's master.
	Self paxos.NodeID
	// OnMaster, if set, is told of every change in this replica's view of
	// a group's mastership (group index, new state). It runs on the
	// paxos host's loop, which drives every Paxos group, and must not
	// block.
	OnMaster func(group ID, s paxos.SoftState)
	// Observer, if set, is told of requests, proposals, waits and lock
	// events, for metrics.
	Observer Observer
	// OnMembers, if set, is told that the cluster's member list changed
	// (Service.Members; applied or loaded from a snapshot on group 0).
	// It runs on the paxos host's loop and must not block.
	OnMembers func()
	// OnRegistry, if set, is told that the registry's tables changed
	// (Service.RegistryTables; applied or loaded from a snapshot on group
	// 0). It runs on the paxos host's loop and must not block.
	OnRegistry func()
	// Registry bounds the registry's tables (systable.RegistryLimits).
	Registry RegistryLimits
	// Join: this node is being added to running Paxos groups (see
	// host.ReplicaConfig.Join); NewService only.
	Join bool
}

// The defaults of Config's lock service settings (the node's
// configuration takes them from here).
const (
	DefaultWorkers     = 8
	DefaultTTL         = 30 * time.Second
	DefaultMinTTL      = time.Second
	DefaultMaxTTL      = 24 * time.Hour
	DefaultMaxWaiters  = 10000
	DefaultWeightAging = time.Second
)

// Service is the lock service of one node: one lock group per Paxos
// group, each with its workers.
type Service struct {
	cfg     Config
	obs     Observer // cfg.Observer
	groups  []*Group
	clients clientSinks // see AttachClient
	use     usage       // waits and watches per connection and namespace
	// quota is the namespaces' quota table (quotacheck.go), quotaBase the
	// origin of its rate clock; quotaLive says the groups are all made,
	// so that a change of group 0's quotas may refresh the table.
	quota     quotaTable
	quotaBase time.Time
	quotaLive atomic.Bool
	realClock bool // cfg.Clock is RealClock: see quotaNow
	// served counts the groups this node serves as master: its share of
	// the namespaces' cluster-wide quotas.
	served atomic.Int32
}

// Group is one lock group on this node: its state machine, its workers
// and its replication (a replica group, see ID.ReplicaGroup).
type Group struct {
	svc     *Service
	id      ID
	px      Consensus
	sm      *StateMachine
	workers []*worker

	// serve orders this node's answers from its lock table against a
	// mastership transfer. A worker holds it for reading from its lease check until
	// its answer is queued; masterChanged, which the host's loop calls
	// after publishing that this node stopped serving and before the
	// round's TimeoutNow leaves, takes it for writing. So every answer
	// given under the old mastership (a State, a LOCK_OCCUPIED) was
	// queued before the new master could be elected — and before it could
	// grant anything — and every later one sees that this node no longer
	// serves. Without it a worker descheduled between the check and the
	// answer could answer from a table the new master has moved past.
	serve sync.RWMutex
	// self is this node; preferred the node that should master the group
	// (0: none), kept to tell a transfer from an election in the logs.
	self      paxos.NodeID
	preferred atomic.Uint32
	// soft is the last mastership state seen, under softMu; served is
	// the last ballot this node served under (see Elected).
	softMu sync.Mutex
	soft   paxos.SoftState
	served paxos.Ballot
	// stepping: this node stopped serving the group and the next master
	// is not known yet (countMaster; the host's loop only).
	stepping bool
	// prefix is the group's prefix watches, while this node masters it.
	prefix prefixWatches
}

// NewService creates the lock groups on h, lock group g replicated by
// the replica group g.ReplicaGroup(), each with peers as replicas.
// preferred(g) names the node that should master group g, 0 for none.
func NewService(cfg Config, h *host.Host, peers []paxos.NodeID, pcfg paxos.Config, preferred func(g ID) paxos.NodeID) (*Service, error) {
	if cfg.Self == 0 {
		cfg.Self = pcfg.ID
	}
	return NewServiceWith(cfg, func(g ID, sm *StateMachine) (Consensus, error) {
		c := pcfg
		c.Group = g.ReplicaGroup()
		c.Peers = peers
		return h.AddReplica(host.ReplicaConfig{Core: c, Join: cfg.Join}, sm)
	}, preferred)
}

// NewServiceWith creates the lock groups, each replicated by what
// replicate returns for it. preferred(g) names the node that should
// master group g, 0 for none.
func NewServiceWith(cfg Config, replicate Replicate, preferred func(g ID) paxos.NodeID) (*Service, error) {
	cfg.EnsureDefaults()
	_, real := cfg.Clock.(RealClock)
	s := &Service{cfg: cfg, obs: cfg.Observer, quotaBase: cfg.Clock.Now(), realClock: real}
	env := workerEnv{cfg: &s.cfg, obs: s.obs, use: &s.use, quota: &s.quota, clients: &s.clients, adm: s}
	for g := ID(0); g < ID(cfg.Groups); g++ {
		sm := NewStateMachine(cfg.Workers)
		sm.quota, sm.gid = &s.quota, g
		lg := &Group{svc: s, id: g, sm: sm, self: cfg.Self}
		for i := 0; i < cfg.Workers; i++ {
			lg.workers = append(lg.workers, newWorker(lg, i, env))
		}
		sm.observe(lg.masterChanged)
		sm.moveObs = lg.moveChanged
		if g == NamespaceGroup {
			sm.members.SetObserver(cfg.OnMembers)
			sm.reg.SetObserver(cfg.OnRegistry)
			sm.quotas.SetObserver(func() {
				if s.quotaLive.Load() {
					// Off the apply: a refresh takes every group's lock.
					go s.quota.refresh(s)
				}
			})
		}
		px, err := replicate(g, sm)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("group: %w", err)
		}
		lg.px = px
		if preferred != nil {
			lg.SetPreferred(preferred(g))
		}
		s.groups = append(s.groups, lg)
		// The group may already be master (single node): tell the workers.
		lg.masterChanged(px.Status())
	}
	s.quotaLive.Store(true)
	s.quota.refresh(s)
	return s, nil
}

// Close stops the workers; it may be called more than once. The paxos
// host is stopped by its owner.
func (s *Service) Close() {
	for _, g := range s.groups {
		for _, w := range g.workers {
			w.stop()
		}
	}
}

// Groups returns the lock groups, indexed by wire.GroupOf.
func (s *Service) Groups() []*Group { return s.groups }

// Group returns lock group g.
func (s *Service) Group(g ID) *Group { return s.groups[g] }

// Submit routes r to its key's worker. It never blocks; the answer and any
// later events reach r.Sink.
func (s *Service) Submit(r *Request) {
	g := s.groups[wire.GroupOf(r.Hash, len(s.groups))]
	g.workers[wire.WorkerOf(r.Hash, len(g.workers))].submit(r)
}

// ForgetClient removes every waiter and watch of client id (its connection
// closed). Held locks are untouched: they expire unless renewed.
func (s *Service) ForgetClient(id uint64, sink Sink) {
	s.clients.remove(id, sink)
	for _, g := range s.groups {
		for _, w := range g.workers {
			w.post(event{kind: evForget, client: id, sink: sink})
		}
	}
}

// RevokeClient ends what client id has over sink, whose session in
// namespace ns lost its authentication (namespace removed, secret
// changed): its waiters over sink get Granted AUTH_FAILED; its holds in ns
// whose master here knows sink, or no open connection of them (granted
// under another master, before a move), get Lost EventRevoked over sink;
// then its waits and watches over sink are forgotten as by ForgetClient.
// The holds stay in the table and expire after their TTL. done, if not
// nil, is called once every worker has done so.
func (s *Service) RevokeClient(id uint64, ns string, sink Sink, done func()) {
	var left atomic.Int64
	for _, g := range s.groups {
		left.Add(int64(len(g.workers)))
	}
	countdown := func() {
		if left.Add(-1) == 0 && done != nil {
			done()
		}
	}
	for _, g := range s.groups {
		for _, w := range g.workers {
			w.post(event{kind: evRevoke, client: id, req: &Request{Namespace: ns}, sink: sink, revoked: countdown})
		}
	}
}

// leaseValid reports whether this node's master lease of the group runs
// now, on the monotonic clock.
func (g *Group) leaseValid() bool { return g.px.Status().Serving }

// Consensus returns the replication under lock group g (a *host.Replica
// when the service was made by NewService).
func (g *Group) Consensus() Consensus { return g.px }

// StateMachine returns the group's lock table.
func (g *Group) StateMachine() *StateMachine { return g.sm }

// Serving reports whether this node is the group's serving master.
func (g *Group) Serving() bool { return g.px.Status().Serving }

// Elected reports whether this node won the group's election under a
// ballot it has not served yet: it will serve once it has applied the
// instances chosen before that ballot. A request submitted to a
// master-elect waits for it to serve (up to a second) rather than being
// answered NO_MASTER. A master that served and lost its lease is not a
// master-elect: it answers NO_MASTER at once, as before.
func (g *Group) Elected() bool {
	if g.self == 0 {
		return false
	}
	s := g.px.Status()
	if s.Master != g.self || s.Serving {
		return false
	}
	g.softMu.Lock()
	defer g.softMu.Unlock()
	return s.Ballot != g.served
}

// SetPreferred names the node that should master the group (0: none); a
// master transfers the group to it once it has caught up.
func (g *Group) SetPreferred(id paxos.NodeID) {
	g.preferred.Store(uint32(id))
	g.px.SetPreferred(id)
}

func (g *Group) masterChanged(s paxos.SoftState) {
	if !s.Serving {
		// Wait for the answers that passed the lease check before the
		// status changed (see serve).
		g.serve.Lock()
		g.serve.Unlock() //nolint:staticcheck // SA2001: the empty critical section is the point: it waits for readers
	}
	g.softMu.Lock()
	prev := g.soft
	g.soft = s
	if s.Serving {
		g.served = s.Ballot
	}
	switch {
	case s.Serving && !prev.Serving:
		g.svc.served.Add(1)
	case !s.Serving && prev.Serving:
		g.svc.served.Add(-1)
	}
	g.softMu.Unlock()
	g.logMaster(prev, s)
	g.countMaster(prev, s)
	if f := g.svc.cfg.OnMaster; f != nil {
		f(g.id, s)
	}
	for _, w := range g.workers {
		w.post(event{kind: evMaster, serving: s.Serving})
	}
}

// countMaster tells the Observer of mastership events: see StatElectionWon,
// StatMasterTransfer, StatMasterChange and StatLeaseLoss.
func (g *Group) countMaster(prev, s paxos.SoftState) {
	obs := g.svc.obs
	if obs == nil || g.self == 0 {
		return
	}
	if s.Master != prev.Master {
		obs.Count(StatMasterChange)
	}
	pref := paxos.NodeID(g.preferred.Load())
	if s.Master == g.self && prev.Master != g.self {
		if prev.Master != 0 && pref == g.self {
			obs.Count(StatMasterTransfer)
		} else {
			obs.Count(StatElectionWon)
		}
	}
	// Stopping serving is a lease loss unless the group went to its
	// preferred master (a transfer also passes through "no master"): it
	// is decided once the next master is known.
	if prev.Master == g.self && prev.Serving && !s.Serving {
		g.stepping = true
	}
	if g.stepping && s.Master != 0 {
		g.stepping = false
		if s.Master == g.self || s.Master != pref {
			obs.Count(StatLeaseLoss)
		}
	}
}

// Waiting returns how many blocked acquires wait in the group's queues and
// how many watches are set, on this node (a master's; 0 on a follower). It
// reads counters, for metrics at scrape time.
func (g *Group) Waiting() (waiters, watches int64) {
	for _, w := range g.workers {
		waiters += w.nwait.Load()
		watches += w.nwatch.Load()
	}
	return waiters, watches
}

// logMaster logs this replica becoming the group's master, starting to
// serve, and ceasing to be master or to serve, with the reason as far as
// this replica can tell it. Changes between other nodes are logged at
// debug level.
func (g *Group) logMaster(prev, s paxos.SoftState) {
	if g.self == 0 {
		return // who this node is was not said: nothing to tell
	}
	log := g.svc.cfg.Logger
	pref := paxos.NodeID(g.preferred.Load())
	group := slog.Int("group", int(g.id))
	switch {
	case s.Master == g.self && prev.Master != g.self:
		var reason string
		switch {
		case prev.Master == 0:
			reason = "elected: no master was known"
		case pref == g.self:
			reason = fmt.Sprintf("hand-off: took the group from node %d as its preferred master", prev.Master)
		default:
			reason = fmt.Sprintf("elected: took over from node %d", prev.Master)
		}
		log.Info("group master elected", group, "ballot", s.Ballot.String(), "previous", uint32(prev.Master), "reason", reason)
	case prev.Master == g.self && s.Master != g.self:
		var reason string
		switch {
		case s.Master == 0:
			// A transfer (a hand-over, a drain) and a lost lease both
			// step down under the same ballot: the successor, if any,
			// is named by the next change.
			reason = "no successor known yet: handed over, or its lease or quorum lost"
		case s.Master == pref:
			reason = fmt.Sprintf("hand-off: gave the group to its preferred master, node %d", s.Master)
		default:
			reason = fmt.Sprintf("superseded by node %d's higher ballot", s.Master)
		}
		log.Info("group master stepped down", group, "ballot", prev.Ballot.String(), "new_master", uint32(s.Master), "new_ballot", s.Ballot.String(), "reason", reason)
	case s.Master != prev.Master || s.Ballot != prev.Ballot:
		log.Debug("group master changed", group, "master", uint32(s.Master), "ballot", s.Ballot.String())
	}
	if s.Master == g.self && s.Serving && !prev.Serving {
		log.Info("group master serving", group, "ballot", s.Ballot.String())
	}
	if prev.Master == g.self && prev.Serving && s.Master == g.self && !s.Serving {
		log.Info("group master stopped serving", group, "ballot", s.Ballot.String(), "reason", "lease not renewed by a quorum")
	}
}

// ErrNotMaster is returned by Service.ForceRelease on a node that does not
// serve the key's group; Group.Master names the node that does.
var ErrNotMaster = errors.New("group: not the master of the key's group")

// Released is a hold that Service.ForceRelease removed.
type Released struct {
	Owner wire.Owner
	Token uint64
}

// ForceRelease frees key of namespace ns, whoever holds it: an operator's
// force-unlock. This node must serve the key's group (else ErrNotMaster).
// Each hold is revoked, one at a time (a read-held key has several): its
// holder is told (a Lost with EventRevoked), its renewals are refused,
// and it is removed through Paxos like an expiry once its holder has
// acknowledged (released the token) or its deadline has passed, so that
// no one else is granted the key while the holder may still believe it
// holds it (see revocation.go). Watchers then get EventRevoked, and
// waiters are granted as after a release. Only holds granted before the
// call are removed (those with a token up to the group's last applied
// instance when it starts), not a waiter's that a removal granted. It
// returns the holds removed, none if the key was free; ctx bounds the
// wait (a holder that does not acknowledge holds the key until its TTL
// runs out, and the revocation stands after ctx ends).
func (s *Service) ForceRelease(ctx context.Context, ns, key string) ([]Released, error) {
	if err := wire.ValidateKey(key); err != nil {
		return nil, err
	}
	hash := wire.KeyHash(ns, key)
	sm := s.groups[wire.GroupOf(hash, len(s.groups))].sm
	bound := sm.Version()<<48 | sm.Applied()&(1<<48-1)
	var out []Released
	for {
		resp, err := s.call(ctx, &Request{Op: OpForceRelease, Namespace: ns, Key: key, Hash: hash, Token: bound})
		if err != nil {
			return out, err
		}
		switch resp.Status {
		case wire.StatusSuccess:
			out = append(out, Released{Owner: resp.Holder, Token: resp.Token})
		case wire.StatusLockDeleted, wire.StatusTokenError, wire.StatusLockChangedOwner:
			return out, nil // nothing (more) held from before the call
		case wire.StatusNoMaster:
			return out, ErrNotMaster
		case wire.StatusMoving:
			return out, ErrNamespaceMoving
		case wire.StatusMoved:
			return out, fmt.Errorf("%w (%s)", ErrNamespaceMoved, resp.Redirect)
		default:
			return out, fmt.Errorf("group: force release %q: %s", key, resp.Status)
		}
	}
}

// call submits r and waits for its answer or ctx.
func (s *Service) call(ctx context.Context, r *Request) (wire.Response, error) {
	ch := make(chan wire.Response, 1)
	r.Sink = replySink(ch)
	s.Submit(r)
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return wire.Response{}, ctx.Err()
	}
}

// replySink is the Sink of a request made by the node itself: it keeps
// the answer and ignores pushes.
type replySink chan wire.Response

func (c replySink) Respond(_ uint64, r wire.Response) {
	select {
	case c <- r:
	default:
	}
}

func (c replySink) Push(wire.Message) {}
