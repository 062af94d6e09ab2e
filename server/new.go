package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/paxos/pebblestore"
	"github.com/paxlock/paxlock/paxos/tcpnet"
)

// New opens the node's storage, starts its Paxos groups and lock service,
// and returns a Server that Start will open to clients. A step that fails
// undoes the ones before it, in one place: the node's life ends (its
// background work stops), then what was opened is closed, the last first.
func New(cfg Config, log *slog.Logger) (_ *Server, err error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	logConfig(cfg, log)
	sec, err := loadSecurity(&cfg, log)
	if err != nil {
		return nil, err
	}
	secrets, verifiers, err := seedNamespaces(cfg)
	if err != nil {
		return nil, err
	}
	tracing, err := newTracing(cfg)
	if err != nil {
		return nil, err
	}
	s := newServer(cfg, log, sec, secrets, verifiers)
	s.tracing = tracing
	var undo cleanups
	defer func() {
		if err != nil {
			s.stopBackground()
			if uerr := undo.run(); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	peers := s.initView()
	if err = s.openStorage(); err != nil {
		return nil, err
	}
	undo.push(s.store.Close)
	if err = s.openTransport(); err != nil {
		return nil, err
	}
	undo.push(s.tr.Close)
	if err = s.startGroups(peers); err != nil {
		return nil, err
	}
	undo.push(s.stopGroups)
	s.applyMembers() // the list loaded from the store, if any
	s.host.Start()
	return s, nil
}

// cleanups is what New undoes when a later step fails: each step that
// opened something pushes its undoing, and run undoes them in the reverse
// order, every one, joining their errors.
type cleanups []func() error

func (u *cleanups) push(f func() error) { *u = append(*u, f) }

func (u cleanups) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		errs = append(errs, u[i]())
	}
	return errors.Join(errs...)
}

// logConfig logs the effective configuration, and warns of an even
// number of nodes.
func logConfig(cfg Config, log *slog.Logger) {
	log.Info("effective config", "config", cfg)
	if n := len(cfg.Nodes); n%2 == 0 {
		log.Warn("an even number of nodes tolerates no more failures than one node fewer: a majority of 4 is 3, so 4 nodes survive 1 failure like 3 do, and 6 survive 2 like 5 do; use an odd number",
			"nodes", n, "tolerates", (n-1)/2)
	}
}

// seedNamespaces returns the configured namespaces' secrets and the
// verifiers that seed the replicated namespace table on a new cluster,
// by name.
func seedNamespaces(cfg Config) (map[string]string, map[string]scramauth.Verifier, error) {
	secrets, verifiers := map[string]string{}, map[string]scramauth.Verifier{}
	for _, n := range cfg.Namespaces { // names checked by Validate
		v, err := group.SeedVerifier(cfg.ClusterName, n.Name, n.Secret)
		if err != nil {
			return nil, nil, fmt.Errorf("server: namespace %q: %w", n.Name, err)
		}
		secrets[n.Name], verifiers[n.Name] = n.Secret, v
	}
	return secrets, verifiers, nil
}

// newServer makes the Server, its life and metrics, with the configured
// namespaces' seeds (seedNamespaces).
func newServer(cfg Config, log *slog.Logger, sec security, secrets map[string]string, verifiers map[string]scramauth.Verifier) *Server {
	s := &Server{cfg: cfg, log: log, subs: map[*conn]struct{}{}, memCh: make(chan struct{}, 1), failed: make(chan error, 1), memChange: make(chan struct{}, 1),
		sec:      sec,
		started:  time.Now(),
		tlsSlots: newHandshakeSlots(cfg.MaxTLSHandshakes)}
	s.reg.ch = make(chan struct{}, 1)
	s.life, s.endLife = context.WithCancel(context.Background())
	s.metrics = newMetrics(s)
	s.seedSecrets, s.seedVerifiers = secrets, verifiers
	return s
}

// initView stores the address book of the configured nodes and builds
// the first cluster view; it returns the configured nodes' ids.
func (s *Server) initView() []paxos.NodeID {
	var peers []paxos.NodeID
	book := addrBook{}
	for _, n := range s.cfg.Nodes {
		peers = append(peers, paxos.NodeID(n.ID))
		book[paxos.NodeID(n.ID)] = n
	}
	s.book.Store(&book)
	s.masters = make([]paxos.SoftState, s.cfg.Groups)
	s.masterNews = make(chan struct{})
	s.rebuildView()
	return peers
}

// openStorage checks the data directory's identity, loads the peers'
// incarnations and opens the store.
func (s *Server) openStorage() error {
	cfg, log := s.cfg, s.log
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("server: data dir: %w", err)
	}
	idn, err := checkIdentity(cfg.DataDir, cfg)
	if err != nil {
		return err
	}
	s.incarnation = idn.Incarnation
	if s.peerIncs, err = openPeerIncarnations(cfg.DataDir, log); err != nil {
		return err
	}
	if idn.Joined {
		// A group this node has no data of yet (the node stopped before
		// its snapshot came) must wait for one, not start alone.
		s.cfg.Join = true
	}
	st, err := pebblestore.Open(cfg.DataDir, pebblestore.Options{Logger: log, FS: cfg.storeFS, BlockingSync: cfg.DisableIOURing, NoWALSpares: cfg.DisableWALSpares,
		MemTableSize: cfg.memTable(), CacheSize: cfg.blockCache()})
	if err != nil {
		return err
	}
	s.store = st
	return nil
}

// startGroups makes the Paxos host on the store and the peer transport
// and the lock service's groups over peers, then binds the transport's
// handler to the host.
func (s *Server) startGroups(peers []paxos.NodeID) error {
	cfg, log, st := s.cfg, s.log, s.store
	tick := time.Duration(cfg.Tick)
	var out paxos.Transport = s.tr
	if s.faults != nil {
		out = s.faults
	}
	s.host = host.New(host.Config{Self: paxos.NodeID(cfg.NodeID), Store: st, Tick: tick, Transport: out, Logger: log, Observer: s.metrics})
	// Retransmissions and the follower's wait past the lease stay those of
	// a 100ms heartbeat when the heartbeat is longer (Config.Heartbeat).
	quick := int(min(time.Duration(cfg.Heartbeat), 100*time.Millisecond) / tick)
	pcfg := paxos.Config{
		HeartbeatTicks:     int(time.Duration(cfg.Heartbeat) / tick),
		LeaseTicks:         int(time.Duration(cfg.Lease) / tick),
		RetransmitTicks:    quick,
		CampaignSlackTicks: 2 * quick,
		MaxDrift:           cfg.MaxDrift,
		MaxInflight:        cfg.InstanceWindow,
		QuorumSync:         cfg.quorumSync(),
	}
	cfg.ConsensusLimits.apply(&pcfg)
	svc, err := group.NewService(group.Config{
		Groups:                    cfg.Groups,
		Workers:                   cfg.Workers,
		DefaultTTL:                time.Duration(cfg.DefaultTTL),
		MinTTL:                    time.Duration(cfg.MinTTL),
		MaxTTL:                    time.Duration(cfg.MaxTTL),
		WeightAging:               time.Duration(cfg.WeightAging),
		MaxConnWaits:              cfg.MaxWaitsPerConn,
		MaxConnWatches:            cfg.MaxWatchesPerConn,
		MaxNamespaceWaits:         cfg.MaxWaitsPerNamespace,
		MaxNamespaceWatches:       cfg.MaxWatchesPerNamespace,
		MaxConnPrefixWatches:      cfg.MaxPrefixWatchesPerConn,
		MaxNamespacePrefixWatches: cfg.MaxPrefixWatchesPerNamespace,
		MaxHoldersPerKey:          cfg.MaxHoldersPerKey,
		MaxWaited:                 time.Duration(cfg.MaxWaited),
		Logger:                    log,
		Self:                      paxos.NodeID(cfg.NodeID),
		OnMaster:                  s.onMaster,
		Observer:                  s.metrics,
		OnMembers:                 s.membersChanged,
		OnRegistry:                s.registryChanged,
		Registry:                  cfg.RegistryLimits.group(),
		Join:                      cfg.Join,
	}, s.host, peers, pcfg, func(g group.ID) paxos.NodeID { return peers[int(g)%len(peers)] })
	if err != nil {
		return err
	}
	s.svc = svc
	// Bound last: binding starts the transport's inbound connections,
	// whose Admit (admitPeer) reads the service.
	if s.faults != nil {
		s.faults.deliver = s.host.Deliver
		s.tr.SetHandler(s.faults.Deliver)
	} else {
		s.tr.SetHandler(s.host.Deliver)
	}
	return nil
}

// stopGroups stops what startGroups started, for New's undoing: the
// host and the lock service's groups, and then the background work (it
// watches the node's life, which has ended).
func (s *Server) stopGroups() error {
	s.host.Stop()
	s.svc.Close()
	_ = s.waitBackground(context.Background()) // nil: it waits without a bound
	return nil
}

// openTransport opens the peer transport (behind the fault injector when
// Config.FaultInjection), for startGroups to give to the host; until the
// host binds its handler, what peers send is dropped.
func (s *Server) openTransport() error {
	cfg, log := s.cfg, s.log
	self := cfg.self()
	others := map[paxos.NodeID]string{}
	for _, n := range cfg.Nodes {
		if n.ID != cfg.NodeID {
			others[paxos.NodeID(n.ID)] = n.Peer
		}
	}
	tr, err := tcpnet.New(tcpnet.Config{Self: paxos.NodeID(cfg.NodeID), Listen: cfg.bindAddr(self.Peer), Peers: others, Logger: log, TLS: s.sec.peer,
		Incarnation: s.incarnation, Cluster: cfg.ClusterName, Admit: s.admitPeer, Refused: s.peerRefused,
		IdleTimeout: time.Duration(cfg.PeerIdleTimeout), MaxConnsPerPeer: cfg.MaxPeerConnsPerNode, MaxHandshakes: cfg.MaxTLSHandshakes})
	if err != nil {
		return err
	}
	s.tr = tr
	if cfg.FaultInjection {
		s.faults = &partition{next: tr}
		log.Warn("fault injection is on: /debug/partition can cut this node off from its peers")
	}
	return nil
}
