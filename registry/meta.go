// This file is the registry's subscription to the meta cluster's tables:
// one session at a time with a meta node, authenticated as the meta
// cluster's registry namespace, resumed at the version the registry has
// after every reconnect.

package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	crand "crypto/rand"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// MetaConfig is where a registry gets its tables: the meta cluster, whose
// lock group 0 holds them (see docs/design.md, "Many clusters").
type MetaConfig struct {
	// Addrs lists meta nodes' client addresses (host:port); the registry
	// subscribes at one at a time and moves on when it fails.
	Addrs []string
	// Namespace and Secret authenticate the registry to the meta nodes:
	// the meta nodes' registry_namespace and its secret. Never logged.
	Namespace, Secret string
	// TLS, if set, wraps the connections to the meta nodes (their
	// client_tls_addr listeners): server name and CA, and a client
	// certificate where the meta nodes bind the namespace to one.
	TLS *tls.Config
	// Admin lists the meta nodes' admin addresses (host:port). With it,
	// the registry takes part in driving namespace moves: the one that
	// holds the mover lock (MoverLockKey, in Namespace) records each step
	// there. AdminCA is the PEM CA of their admin HTTPS ("" for plain
	// HTTP) and AdminToken their admin token (default: the registry's
	// AdminToken). Never logged.
	Admin      []string
	AdminCA    string
	AdminToken string
	// MoverTTL is the mover lock's TTL (default 10s), renewed every
	// third of it while held: how long moves stay undriven after the
	// driving registry died, before another takes over.
	MoverTTL time.Duration
}

func (m *MetaConfig) validate() []error {
	var errs []error
	if len(m.Addrs) == 0 {
		errs = append(errs, errors.New("meta: no addresses"))
	}
	for _, a := range m.Addrs {
		if _, _, err := splitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("meta: address %q: %w", a, err))
		}
	}
	if err := wire.ValidateNamespace(m.Namespace); err != nil {
		errs = append(errs, fmt.Errorf("meta: namespace: %w", err))
	}
	if m.Secret == "" {
		errs = append(errs, errors.New("meta: no secret for the registry namespace"))
	}
	for _, a := range m.Admin {
		if _, _, err := splitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("meta: admin address %q: %w", a, err))
		}
	}
	return errs
}

// metaState is what the registry knows of its meta subscription.
type metaState struct {
	ready     chan struct{} // closed at the first tables (or Unchanged) received
	readyOnce sync.Once

	mu        sync.Mutex
	connected bool
	upstream  string
	lastErr   string
	changed   time.Time // when connected last changed
}

func (m *metaState) init() { m.ready = make(chan struct{}) }

func (m *metaState) set(connected bool, upstream string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if connected != m.connected {
		m.changed = time.Now()
	}
	m.connected, m.upstream = connected, upstream
	if err != nil {
		m.lastErr = err.Error()
	}
	if connected {
		m.readyOnce.Do(func() { close(m.ready) })
	}
}

// MetaStatus is what a registry reports of the meta cluster.
type MetaStatus struct {
	// Configured says the tables come from a meta cluster (false: static).
	Configured bool `json:"configured"`
	// Connected says the registry holds a subscription at a meta node.
	// While it does not, it serves the last tables it received.
	Connected bool `json:"connected"`
	// Upstream is the meta node subscribed at ("" when none).
	Upstream string `json:"upstream,omitempty"`
	// Since is when Connected last changed.
	Since time.Time `json:"since,omitzero"`
	// LastError is why the last subscription ended or failed.
	LastError string `json:"last_error,omitempty"`
	// Version is the version of the tables the registry serves.
	Version uint64 `json:"version"`
}

// Meta reports the registry's meta subscription.
func (s *Standalone) Meta() MetaStatus {
	st := MetaStatus{Configured: s.cfg.Meta != nil, Version: s.tablesVersion()}
	s.meta.mu.Lock()
	st.Connected, st.Upstream, st.Since, st.LastError = s.meta.connected, s.meta.upstream, s.meta.changed, s.meta.lastErr
	s.meta.mu.Unlock()
	return st
}

// followMeta keeps the registry subscribed to the meta cluster's tables
// until it shuts down, moving between the meta nodes and pausing with
// growing backoff after a round in which none answered.
func (s *Standalone) followMeta() {
	defer s.wg.Done()
	addrs := slices.Clone(s.cfg.Meta.Addrs)
	backoff := s.cfg.ReconnectMin
	for s.ctx.Err() == nil {
		got := false
		for _, addr := range addrs {
			ok, err := s.metaSession(addr)
			s.meta.set(false, "", err)
			if s.ctx.Err() != nil {
				return
			}
			if ok {
				got = true
				s.log.Warn("registry: lost the meta cluster node, serving the last tables until another answers", "node", addr, "err", err, "version", s.tablesVersion())
				break
			}
			s.log.Debug("registry: meta node unavailable", "node", addr, "err", err)
		}
		wait := s.cfg.ReconnectMin
		if got {
			backoff = s.cfg.ReconnectMin
		} else {
			wait = backoff
			backoff = min(backoff*2, s.cfg.ReconnectMax)
		}
		wait = wait/2 + rand.N(wait/2+1)
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return
		}
	}
}

// metaSession subscribes at one meta node until the session ends; it
// reports whether the node served the tables.
func (s *Standalone) metaSession(addr string) (bool, error) {
	m := s.cfg.Meta
	key := crand.Text()
	first := wire.ScramClientFirst{Namespace: m.Namespace, ClientID: wire.ClientIDOf(key), ClientKey: key, Agent: "paxlock-registry"}
	cfg := session.Config{
		DialTimeout:       s.cfg.DialTimeout,
		Handshake:         session.SCRAM(first, m.Secret),
		HandshakeTimeout:  s.cfg.RequestTimeout,
		MaxFrame:          wire.MaxRegistryFrame,
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		HeartbeatTimeout:  s.cfg.RequestTimeout,
		WriteTimeout:      s.cfg.RequestTimeout,
	}
	if m.TLS != nil {
		d := tls.Dialer{Config: m.TLS}
		cfg.Dial = func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }
	}
	sc, _, err := session.Dial(s.ctx, addr, cfg)
	if err != nil {
		return false, fmt.Errorf("meta %s: %w", addr, err)
	}
	stop := context.AfterFunc(s.ctx, func() { sc.Close(s.ctx.Err()) })
	defer stop()
	h := &metaHandler{s: s, addr: addr, sc: sc, reqID: metaSubID, asking: true}
	if err := sc.Append(wire.TypeSubscribeRegistry, metaSubID, &wire.SubscribeRegistry{Version: s.tablesVersion(), Paged: true}); err != nil {
		sc.Close(err)
		return false, fmt.Errorf("meta %s: %w", addr, err)
	}
	err = sc.Run(h)
	if h.refused != nil {
		return false, h.refused
	}
	return h.got, fmt.Errorf("meta %s: %w", addr, err)
}

// metaSubID is the request id of the subscription (the handshake's are
// below it, the later page requests' above it).
const metaSubID = 2

// metaHandler is the registry's side of one meta session. Its methods run
// on the session's reader.
//
// The registry subscribes asking for pages. A node of the earlier
// protocol ignores that and sends the tables whole (unpaged), as before.
// A node that pages answers page 0 of its tables and announces each later
// version with a push that carries none: the registry asks for the pages
// of one version at a time, one page outstanding, and applies the tables
// once it has the last one, so it never holds a mix of two versions; a
// newer version announced meanwhile is asked for from page 0 once that
// one is applied.
type metaHandler struct {
	s       *Standalone
	addr    string
	sc      *session.Conn
	codec   wire.Codec
	got     bool
	refused error

	asm    wire.RegistryAssembly
	reqID  uint64 // the request outstanding (metaSubID, then page requests)
	asking bool   // a request is outstanding
	newest uint64 // the newest version announced
}

// Frame implements session.Handler: the subscription's reply and pushes
// replace the tables when they are newer than the registry's.
func (h *metaHandler) Frame(f wire.Frame, _ []byte) {
	switch f.Type {
	case wire.TypeRegistryTables, wire.TypeRegistryChanged:
		t := new(wire.RegistryTables)
		if err := h.codec.DecodeInto(f.Body, t); err != nil {
			h.s.log.Warn("registry: undecodable tables from meta node", "node", h.addr, "err", err)
			return
		}
		if !h.got {
			h.got = true
			h.s.meta.set(true, h.addr, nil)
			h.s.log.Info("registry: subscribed to the meta cluster's tables", "node", h.addr, "version", t.Version, "paged", t.Paged)
		}
		switch {
		case !t.Paged:
			h.apply(t) // a node of the earlier protocol: the tables whole
		case f.Type == wire.TypeRegistryChanged:
			h.newest = max(h.newest, t.Version)
			h.askNewest()
		case f.ReqID == h.reqID:
			h.page(t)
		}
	case wire.TypeResponse:
		if f.ReqID != h.reqID {
			return
		}
		var r wire.Response
		if err := h.codec.DecodeInto(f.Body, &r); err != nil {
			return
		}
		h.refused = fmt.Errorf("meta %s: subscribe: %s %s", h.addr, r.Status, r.Msg)
		h.sc.Close(h.refused)
	}
}

// page takes the reply to the request outstanding.
func (h *metaHandler) page(t *wire.RegistryTables) {
	h.asking = false
	if t.Unchanged {
		h.asm.Reset()
		h.askNewest()
		return
	}
	whole, err := h.asm.Add(t)
	switch {
	case err != nil:
		h.sc.Close(fmt.Errorf("meta %s: %w", h.addr, err))
		return
	case whole == nil:
		v, p := h.asm.Next()
		h.ask(&wire.SubscribeRegistry{Version: v, Paged: true, Page: p})
		return
	}
	h.apply(whole)
	h.askNewest()
}

// askNewest asks for page 0 of the newest version announced, when it is
// newer than the tables and no request is outstanding.
func (h *metaHandler) askNewest() {
	if !h.asking && h.newest > h.s.tablesVersion() {
		h.ask(&wire.SubscribeRegistry{Version: h.s.tablesVersion(), Paged: true})
	}
}

func (h *metaHandler) ask(m *wire.SubscribeRegistry) {
	h.reqID++
	h.asking = true
	if err := h.sc.Append(wire.TypeSubscribeRegistry, h.reqID, m); err != nil {
		h.sc.Close(err)
	}
}

// apply makes t the registry's tables when it is newer than them.
func (h *metaHandler) apply(t *wire.RegistryTables) {
	if !t.Unchanged && t.Version > h.s.tablesVersion() {
		h.s.applyTables(t)
		h.s.log.Info("registry: tables", "version", t.Version, "clusters", len(t.Clusters), "namespaces", len(t.Namespaces))
	}
}

// Heartbeat implements session.Handler.
func (h *metaHandler) Heartbeat(*wire.Response) {}

// Closed implements session.Handler; metaSession returns the cause.
func (h *metaHandler) Closed(error) {}
