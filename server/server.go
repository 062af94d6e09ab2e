package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/scramauth"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/paxos/pebblestore"
	"github.com/paxlock/paxlock/paxos/tcpnet"
	"github.com/paxlock/paxlock/wire"
)

// Server is one running node.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store *pebblestore.Store
	host  *host.Host
	tr    *tcpnet.Transport
	svc   *group.Service

	// The cluster's nodes (members.go): book is the address book of the
	// live nodes, placeIDs the active members placement uses (nil: the
	// configured nodes), both replaced when the member list changes;
	// memCh wakes followMembers; memApplyMu serialises applyMembers.
	book        atomic.Pointer[addrBook]
	placeIDs    atomic.Pointer[[]uint32]
	memCh       chan struct{}
	memApplyMu  sync.Mutex
	initingMem  atomic.Bool
	incarnation uint64 // the data directory's (IDENTITY)
	// recording holds the ids whose incarnation is being recorded
	// (admitPeer); peerIncs the peers' incarnations this node saw
	// (PEERS); failed receives why the node must stop (Failed).
	recording sync.Map
	peerIncs  *peerIncarnations
	failed    chan error
	failOnce  sync.Once
	// memChange is held by the member change in progress on this node
	// (an operator's, or one resumed); resuming is set while
	// resumeMemberChanges runs.
	memChange chan struct{}
	resuming  atomic.Bool

	// The configured namespaces: their secrets (which give a namespace
	// record written before SCRAM its verifier) and their verifiers (the
	// table's seed, see group.Service.Credentials). Never logged.
	seedSecrets   map[string]string
	seedVerifiers map[string]scramauth.Verifier

	// cluster view
	viewMu  sync.Mutex
	masters []paxos.SoftState
	// masterNews is closed, and replaced, at every change of a group's
	// master as this node sees it (under viewMu; see WaitReady and
	// waitMastered).
	masterNews chan struct{}
	view       atomic.Pointer[wire.View]
	tlsView    atomic.Pointer[wire.View] // view with the TLS client addresses, for the TLS listener's connections
	subs       map[*conn]struct{}
	// reg serves the registry's tables to subscribed registry processes
	// (registry_serve.go).
	reg regServe

	// client listener: with client_listener gnet, gnetLoops runs the
	// connections' event loops (gnetlistener.go), running is set once
	// they are started, and gnetAccepting is closed when the accept loop
	// that hands them connections has returned.
	gnetLoops     *gnet.Client
	running       atomic.Bool
	gnetAccepting chan struct{}
	conns         sync.Map // *conn -> struct{}
	nsGen         uint64   // the namespace table's generation checkRevoked last saw (tick only)
	nconns        atomic.Int64
	nsConns       nsConns // client sessions per namespace (SessionLimits.MaxConnsPerNamespace)
	admin         *http.Server
	// listeners is the client listeners' accept health (/readyz);
	// tlsSlots bounds the TLS handshakes under way on the client port.
	listeners listeners
	tlsSlots  *handshakeSlots
	clientLn  string
	tlsAddr   string // the TLS client listener's address, once open

	stats stats
	// outBudget is the client connections' queued output, bounded by
	// max_output_total (outbudget.go).
	outBudget outputBudget
	metrics   *metrics // the /metrics registry and its instruments
	// masterLog remembers the last master changes for the console;
	// consoleHTTP (made once, under consoleOnce) reads peers' status.
	masterLog   masterLog
	consoleOnce sync.Once
	consoleHTTP *http.Client
	faults      *partition // nil unless Config.FaultInjection
	sec         security   // certificates, keys and tokens, loaded by New
	// clientTLS is the TLS client listener's configuration for the client
	// CA pool in use (clientTLSFor), rebuilt when the pool changes.
	clientTLS atomic.Pointer[clientTLSCached]
	// initingNS is set while initNamespaces runs.
	initingNS atomic.Bool
	gossip    atomic.Pointer[nodeGossip] // set by Start; the host loop reads it
	alive     map[uint32]bool            // from gossip; nil means everyone is presumed alive

	// life ends (endLife) when Shutdown starts: work the node does in the
	// background (namespace installation, relays, gossip) watches it. bg
	// counts that work's goroutines, which Shutdown waits for; once
	// bgClosed is set, goBackground starts nothing more.
	life     context.Context
	endLife  context.CancelFunc
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
}

// installNamespaces installs namespaces into the replicated table (see
// initNamespaces). It is a variable so that tests can make it fail.
var installNamespaces = (*group.Service).InitNamespaces

// goBackground runs f in a goroutine that Shutdown waits for, and reports
// false, running nothing, once Shutdown has begun.
func (s *Server) goBackground(f func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return false
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
	return true
}

// waitBackground waits, within ctx, for the goroutines goBackground
// started; the caller has set bgClosed.
func (s *Server) waitBackground(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("server: shutdown: background work still running: %w", ctx.Err())
	}
}

type stats struct {
	requests, redirects, forwarded, relays, overloaded, badFrames atomic.Uint64
	slowConsumers                                                 atomic.Uint64
	authTimeouts                                                  atomic.Uint64 // connections closed unauthenticated at auth_timeout
	// authLogged is when (unix nanos) an auth failure was last logged,
	// authQuiet how many were not logged since (see logAuthFailure).
	authLogged atomic.Int64
	authQuiet  atomic.Uint64
}

// Start opens the client listener (and the admin endpoint) and returns
// once they accept connections.
func (s *Server) Start(ctx context.Context) error {
	self := s.cfg.self()
	s.clientLn = self.Client
	if s.cfg.ClientListener == ListenerNetpoll {
		if _, err := s.startGoListener(self.Client, false); err != nil {
			return err
		}
		if !s.goBackground(s.sweepLoop) {
			return errors.New("server: start: shut down")
		}
	} else if err := s.startGnet(self.Client); err != nil {
		return err
	}
	if self.ClientTLS != "" {
		if err := s.startTLS(self.ClientTLS); err != nil {
			return err
		}
	}
	if !s.goBackground(s.followMembers) || !s.goBackground(s.followRegistry) {
		return errors.New("server: start: shut down")
	}
	if err := s.startGossip(ctx); err != nil {
		return fmt.Errorf("server: gossip: %w", err)
	}
	if s.cfg.AdminAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.AdminAddr)
		if err != nil {
			return fmt.Errorf("server: admin listener: %w", err)
		}
		if s.sec.adminTLS != nil {
			ln = tls.NewListener(ln, s.sec.adminTLS)
		}
		s.admin, ln = s.adminServer(adminAuth(s.sec.adminToken, s.cfg.AdminPublicRead, s.adminMux()), ln)
		admin := s.admin
		if !s.goBackground(func() { _ = admin.Serve(ln) }) {
			ln.Close()
			return errors.New("server: start: shut down")
		}
	}
	if self.ClientTLS == "" {
		s.log.Warn("no TLS client listener (client_tls_addr): clients' requests, client keys and lock values cross the network in clear on the client port; use it on trusted networks only")
	}
	if s.sec.peer != nil && self.ClientTLS == "" {
		s.log.Warn("peers use TLS but this node has no client_tls_addr: other nodes cannot relay requests to it (clients are redirected instead)")
	}
	s.log.Info("paxlockd serving", "node", s.cfg.NodeID, "client", self.Client, "client_tls", self.ClientTLS, "peer", self.Peer, "admin", s.cfg.AdminAddr)
	return nil
}

// Shutdown stops accepting clients, ends the node's background work
// (namespace installation, relays, gossip) and waits for its goroutines,
// stops the groups (failing what is in flight), and closes the transport
// and the store. ctx bounds the waiting. It is safe to call more than
// once and concurrently: every call returns when the first one is done,
// with its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() { s.shutErr = s.shutdown(ctx) })
	return s.shutErr
}

// stopBackground ends the node's life: background work stops, and no new
// goroutine is started for it.
func (s *Server) stopBackground() {
	s.bgMu.Lock()
	s.bgClosed = true
	s.bgMu.Unlock()
	s.endLife()
}

func (s *Server) shutdown(ctx context.Context) error {
	s.drain(ctx)
	s.stopBackground()
	var errs []error
	if s.running.Load() {
		errs = append(errs, s.stopGnet(ctx))
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Shutdown(ctx))
	}
	if g := s.gossip.Load(); g != nil {
		errs = append(errs, g.shutdown(ctx))
	}
	// Relays end with their client connections, which the engine closed;
	// the ended life also stops those still dialing. The event loop and
	// namespace installation have stopped too.
	errs = append(errs, s.waitBackground(ctx))
	s.host.Stop()
	s.svc.Close()
	errs = append(errs, s.tr.Close())
	errs = append(errs, s.store.Close())
	return errors.Join(errs...)
}

// ClientTLSAddr is the TLS client listener's address ("" without one).
func (s *Server) ClientTLSAddr() string { return s.tlsAddr }

// Service returns the node's lock service.
func (s *Server) Service() *group.Service { return s.svc }

// Config returns the configuration in force.
func (s *Server) Config() Config { return s.cfg }

// credentials returns a namespace's verifier from the replicated
// namespace table (the configured namespaces seed it on a new cluster).
func (s *Server) credentials(ns string) (scramauth.Verifier, bool) {
	return s.svc.Credentials(ns, s.seedVerifiers, s.seedSecrets)
}

// initNamespaces installs the configured namespaces into the replicated
// table of a new cluster; it runs (in the background, see goBackground)
// when this node becomes master of group 0. It tries again, with backoff,
// while this node still serves group 0: a proposal can fail when a loaded
// machine stalls the round past the lease or placement moves the group
// mid-way, and onMaster may not fire again. Shutdown ends it at once.
func (s *Server) initNamespaces() {
	if !s.initingNS.CompareAndSwap(false, true) {
		return // a loop is already at it
	}
	defer s.initingNS.Store(false)
	s.seedSystem("the configured namespaces", s.svc.NamespacesInitialised, func(ctx context.Context) error {
		return installNamespaces(s.svc, ctx, s.seedVerifiers)
	})
}

// seedSystem installs what a new cluster seeds into the namespace group
// (what names it in logs): while this node masters that group and done
// reports false, it calls install, each try bounded by 10 s, retrying
// with backoff until it succeeds or the server shuts down.
func (s *Server) seedSystem(what string, done func() bool, install func(ctx context.Context) error) {
	wait := 50 * time.Millisecond
	for !done() && s.svc.Group(group.NamespaceGroup).Serving() {
		ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
		err := install(ctx)
		cancel()
		if err == nil || s.life.Err() != nil {
			return
		}
		s.log.Warn("installing "+what, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-s.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// onMaster records a group's mastership change and publishes a new view.
func (s *Server) onMaster(g int, st paxos.SoftState) {
	s.viewMu.Lock()
	old := s.masters[g]
	if st.Master == 0 && old.Master != 0 && st.Ballot == old.Ballot {
		// Stepped down without news of a successor: keep pointing clients
		// at the last master until the next one is known.
		s.masters[g] = paxos.SoftState{Ballot: st.Ballot}
	} else {
		s.masters[g] = st
	}
	changed := s.masters[g].Master != old.Master || s.masters[g].Ballot != old.Ballot
	if changed {
		if s.masterNews != nil {
			close(s.masterNews)
		}
		s.masterNews = make(chan struct{})
	}
	s.viewMu.Unlock()
	if changed {
		s.masterLog.record(g, st)
	}
	if g == group.NamespaceGroup && st.Serving {
		s.goBackground(s.initNamespaces) // nothing to do once shutting down
		if !s.svc.MembersInitialised() {
			s.goBackground(s.initMembers)
		} else {
			s.goBackground(s.recordIncarnations)
			s.goBackground(s.resumeIfHalfDone)
		}
	}
	if changed {
		s.publishView()
		if g := s.gossip.Load(); g != nil {
			g.mastersChanged()
		}
	}
}

// setAlive records which nodes gossip says are alive and publishes the
// view if a flag changed (the version rises with it, see
// rebuildViewLocked).
func (s *Server) setAlive(alive map[uint32]bool) {
	s.viewMu.Lock()
	s.alive = alive
	s.viewMu.Unlock()
	s.publishView()
}

// publishView rebuilds the view and pushes it to subscribers if it changed.
func (s *Server) publishView() {
	s.viewMu.Lock()
	old := s.view.Load()
	v := s.rebuildViewLocked()
	if v == old {
		s.viewMu.Unlock()
		return // nothing changed
	}
	tv := s.tlsView.Load() // built with v
	subs := make([]*conn, 0, len(s.subs))
	for c := range s.subs {
		subs = append(subs, c)
	}
	s.viewMu.Unlock()
	for _, c := range subs {
		if c.tlsPort {
			c.Push(tv)
		} else {
			c.Push(v)
		}
	}
}

func (s *Server) rebuildView() {
	s.viewMu.Lock()
	s.rebuildViewLocked()
	s.viewMu.Unlock()
}

// viewSeqBits is how many low bits of a view's version count the changes
// made while the sum of ballot rounds stayed (see rebuildViewLocked).
const (
	viewSeqBits = 16
	viewSeqMask = 1<<viewSeqBits - 1
)

// rebuildViewLocked builds the view from the groups' mastership and the
// alive flags. Its version rises with every change of either: the high
// bits are the sum of the groups' ballot rounds (which only grows, and
// orders the views of different nodes: a node that knows of a later
// election has a higher sum), the low viewSeqBits count the changes since
// the sum last rose. The sum alone did not rise when only a flag, or a
// master within a known ballot, changed, and clients ignored such a view;
// a counter alone would let a node whose flags flapped outrank a node
// that knows newer masters. A rebuild that changes nothing keeps the
// version.
func (s *Server) rebuildViewLocked() *wire.View {
	v := &wire.View{Groups: make([]wire.GroupView, len(s.masters))}
	for g, st := range s.masters {
		v.Version += st.Ballot.Round
		gv := wire.GroupView{Master: uint32(st.Master), Epoch: st.Ballot.Round}
		if st.Master != 0 {
			gv.Addr = s.addr(st.Master).Client
		}
		v.Groups[g] = gv
	}
	v.Version <<= viewSeqBits
	for _, n := range s.nodes() {
		alive := s.alive == nil || s.alive[n.ID] || n.ID == s.cfg.NodeID
		v.Nodes = append(v.Nodes, wire.NodeView{ID: n.ID, Addr: n.Client, Alive: alive})
	}
	if old := s.view.Load(); old != nil {
		if slices.Equal(old.Groups, v.Groups) && slices.Equal(old.Nodes, v.Nodes) {
			return old
		}
		switch {
		case v.Version > old.Version: // the sum rose
		case old.Version&viewSeqMask != viewSeqMask:
			v.Version = old.Version + 1
		default:
			v.Version = old.Version // 65535 changes within one sum: saturated
		}
	}
	s.view.Store(v)
	s.tlsView.Store(s.withTLSAddrs(v))
	return v
}

// withTLSAddrs returns v with the nodes' TLS client addresses in place of
// their plain ones ("" for a node without client_tls_addr): the view a
// client of the TLS listener is served, so that it stays on TLS.
func (s *Server) withTLSAddrs(v *wire.View) *wire.View {
	t := &wire.View{Version: v.Version, Groups: slices.Clone(v.Groups), Nodes: slices.Clone(v.Nodes)}
	for i := range t.Groups {
		if m := t.Groups[i].Master; m != 0 {
			t.Groups[i].Addr = s.addr(paxos.NodeID(m)).ClientTLS
		}
	}
	for i := range t.Nodes {
		t.Nodes[i].Addr = s.addr(paxos.NodeID(t.Nodes[i].ID)).ClientTLS
	}
	return t
}

// relayAddr is where this node relays requests for node id, the master
// of their group: its TLS client listener when the peers use TLS (the
// relay proves there with this node's certificate that it is this node),
// its plain one when the peers run without TLS and the cluster has a
// relay secret (the relay proves it with SCRAM); "" if it has none, or
// without either proof (no relays at all).
func (s *Server) relayAddr(id uint32) string {
	a := s.addr(paxos.NodeID(id))
	switch {
	case s.sec.peer != nil:
		return a.ClientTLS
	case s.sec.relaySecret != "":
		return a.Client
	}
	return "" // nothing to prove a relay with: no relays
}

func (s *Server) subscribe(c *conn, on bool) {
	s.viewMu.Lock()
	if on {
		s.subs[c] = struct{}{}
	} else {
		delete(s.subs, c)
	}
	s.viewMu.Unlock()
}

// WaitReady waits until every group has a master that this node knows.
func (s *Server) WaitReady(ctx context.Context) error {
	for {
		s.viewMu.Lock()
		news := s.masterNews
		ready := true
		for _, st := range s.masters {
			if st.Master == 0 {
				ready = false
			}
		}
		s.viewMu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server: waiting for masters: %w", ctx.Err())
		case <-news:
		}
	}
}

// View returns the node's current cluster view.
func (s *Server) View() *wire.View { return s.view.Load() }
