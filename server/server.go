package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/paxos/pebblestore"
	"github.com/paxlock/paxlock/paxos/tcpnet"
)

// Server is one running node.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store *pebblestore.Store
	host  *host.Host
	tr    *tcpnet.Transport
	svc   *group.Service
	// tracing is the node's tracer (tracing.go); nil when tracing is off.
	tracing *nodeTracing

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
	started     time.Time // when newServer made it: the console's uptime
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
		if _, err := s.startGoListener(s.cfg.bindAddr(self.Client), false); err != nil {
			return err
		}
		if !s.goBackground(s.sweepLoop) {
			return errors.New("server: start: shut down")
		}
	} else if err := s.startGnet(s.cfg.bindAddr(self.Client)); err != nil {
		return err
	}
	if self.ClientTLS != "" {
		if err := s.startTLS(s.cfg.bindAddr(self.ClientTLS)); err != nil {
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
		s.admin, ln = s.adminServer(s.adminHandler(), ln)
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
	errs = append(errs, s.tracing.stop(ctx))
	return errors.Join(errs...)
}

// ClientTLSAddr is the TLS client listener's address ("" without one).
func (s *Server) ClientTLSAddr() string { return s.tlsAddr }

// Service returns the node's lock service.
func (s *Server) Service() *group.Service { return s.svc }

// Config returns the configuration in force.
func (s *Server) Config() Config { return s.cfg }
