// This file serves the registry's tables (lock group 0 of a meta cluster,
// systable/registry.go) to registry processes: SubscribeRegistry, answered
// with the tables, then a RegistryChanged push after every change.

package server

import (
	"fmt"
	"sync"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// regServe is the node's registry subscribers.
type regServe struct {
	ch   chan struct{} // wakes followRegistry (cap 1)
	mu   sync.Mutex
	subs map[*conn]*regSub
	snap *regSnap // the newest tables paged, shared by the subscribers
	// pageBytes bounds a page's body (0: wire.RegistryPageBytes; tests
	// set less, so that small tables take many pages).
	pageBytes int
	// replyBytes bounds a GET /registry reply (0:
	// adminapi.RegistryPageBytes; tests set less).
	replyBytes int
}

// regSub is one subscription.
type regSub struct {
	reqID uint64 // the SubscribeRegistry's (an unpaged push's refusal names it)
	paged bool
	pin   *regSnap // the version whose pages this subscriber is asking for
}

// regSnap is one version of the tables, paged (wire.PageRegistryTables).
type regSnap struct {
	version uint64
	pages   []wire.RegistryTables
}

// drop forgets c's subscription, if any.
func (r *regServe) drop(c *conn) {
	r.mu.Lock()
	delete(r.subs, c)
	r.mu.Unlock()
}

// registryChanged is group.Config.OnRegistry: it runs on the host's
// loop, so it only signals followRegistry.
func (s *Server) registryChanged() {
	if s.reg.ch == nil {
		return
	}
	select {
	case s.reg.ch <- struct{}{}:
	default:
	}
}

// followRegistry tells the subscribers of every change until the node
// shuts down. Changes that come faster than a push are folded into the
// next one. A paged subscriber is sent only the new version, and asks for
// its pages; an unpaged one (a registry of the earlier protocol) is sent
// the whole tables, or refused ERROR when they do not fit one frame.
func (s *Server) followRegistry() {
	for {
		select {
		case <-s.life.Done():
			return
		case <-s.reg.ch:
		}
		s.reg.mu.Lock()
		subs := make(map[*conn]regSub, len(s.reg.subs))
		for c, sub := range s.reg.subs {
			subs[c] = *sub
		}
		s.reg.mu.Unlock()
		if len(subs) == 0 {
			continue
		}
		notice, err := registryFrame(wire.TypeRegistryChanged, 0, &wire.RegistryTables{Version: s.svc.RegistryVersion(), Paged: true})
		if err != nil {
			s.log.Error("registry tables: encoding a push", "err", err)
			continue
		}
		var whole []byte
		for c, sub := range subs {
			switch {
			case c.revoked.Load():
			case sub.paged:
				c.sendRaw(notice)
			default:
				if whole == nil {
					whole = s.wholeRegistryFrame(wire.TypeRegistryChanged, 0, s.svc.RegistryTables())
				}
				c.sendUnpaged(sub.reqID, whole)
			}
		}
	}
}

// wholeRegistryFrame encodes t whole (the earlier protocol's form); nil
// when it does not fit wire.MaxRegistryFrame and the node's max_output.
func (s *Server) wholeRegistryFrame(typ wire.Type, reqID uint64, t group.RegistryTables) []byte {
	frame, err := registryFrame(typ, reqID, registryMessage(t))
	if err != nil || len(frame) > s.cfg.MaxOutput {
		return nil
	}
	return frame
}

// sendUnpaged sends an unpaged subscriber the whole tables, or, when they
// did not fit (frame nil), refuses its subscription ERROR and forgets it:
// a registry of the earlier protocol logs why and retries, and pages the
// tables once it is upgraded.
func (c *conn) sendUnpaged(reqID uint64, frame []byte) {
	if frame != nil {
		c.sendRaw(frame)
		return
	}
	c.s.reg.drop(c)
	c.Reply(reqID, wire.Response{Status: wire.StatusError, Msg: fmt.Sprintf(
		"registry tables over %d bytes travel only in pages: upgrade the registry process", min(wire.MaxRegistryFrame, c.s.cfg.MaxOutput))})
}

// registrySnap returns the newest tables paged, paging them when they
// changed since the last call.
func (s *Server) registrySnap() *regSnap {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	if s.reg.snap != nil && s.reg.snap.version == s.svc.RegistryVersion() {
		return s.reg.snap
	}
	m := registryMessage(s.svc.RegistryTables())
	s.reg.snap = &regSnap{version: m.Version, pages: wire.PageRegistryTables(m, s.reg.pageBytes)}
	return s.reg.snap
}

// registryFrame encodes tables into a frame of up to wire.MaxRegistryFrame.
func registryFrame(typ wire.Type, reqID uint64, t *wire.RegistryTables) ([]byte, error) {
	codec := wire.NewCodec()
	codec.MaxFrame = wire.MaxRegistryFrame
	return codec.AppendFrame(nil, typ, reqID, t)
}

// registryMessage is t as the wire carries it.
func registryMessage(t group.RegistryTables) *wire.RegistryTables {
	m := &wire.RegistryTables{Version: t.Version}
	for _, c := range t.Clusters {
		m.Clusters = append(m.Clusters, wire.RegistryCluster{Name: c.Name, Client: c.Client, Admin: c.Admin, CA: c.CA})
	}
	for _, n := range t.Namespaces {
		m.Namespaces = append(m.Namespaces, wire.RegistryNamespace{
			Name: n.Name, Cluster: n.Cluster, Epoch: n.Epoch,
			Iters: uint32(n.Verifier.Iters), Salt: string(n.Verifier.Salt),
			StoredKey: string(n.Verifier.StoredKey), ServerKey: string(n.Verifier.ServerKey),
		})
	}
	for _, v := range t.Moves {
		m.Moves = append(m.Moves, wire.RegistryMove{Namespace: v.Namespace, From: v.From, To: v.To,
			ID: v.ID, State: uint8(v.State), Step: v.Step, Token: v.Token})
	}
	return m
}

// subscribeRegistry serves SubscribeRegistry on an authenticated
// session. Only a session of the configured registry namespace may
// subscribe: the tables hold every namespace's verifier, from which an
// offline guess of a weak secret could be checked. Any other session is
// refused AUTH_FAILED, and a node without registry_namespace refuses
// every one.
//
// The tables are this node's replica of group 0, read as far as it has
// applied: a registry subscribed here may see a slightly older version
// than group 0's master, and a registry that moves to another node may
// be served an older version than it had. That is fine because versions
// only rise: a registry keeps the newest tables it has seen and ignores
// older ones, and a lagging node pushes the newer version once it applies
// it. The subscriber is recorded before the tables are read, so no
// change falls between the reply and the first push.
//
// A paged subscriber's page 0 pins that version's pages for it, and its
// later pages are served from them, whatever changed meanwhile: every
// page it gathers is of one version, and it gets to the end of one
// however fast the tables change.
func (c *conn) subscribeRegistry(reqID uint64, m *wire.SubscribeRegistry) {
	s := c.s
	ns := s.cfg.RegistryNamespace
	if ns == "" || c.sess.Identity().Namespace != ns || c.sess.Identity().Via != 0 {
		c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "only a session of the node's registry_namespace may subscribe to the registry tables"})
		return
	}
	if m.Page > 0 {
		c.registryPage(reqID, m)
		return
	}
	s.reg.mu.Lock()
	if s.reg.subs == nil {
		s.reg.subs = map[*conn]*regSub{}
	}
	if s.reg.subs[c] == nil {
		s.reg.subs[c] = &regSub{reqID: reqID}
	}
	s.reg.subs[c].paged = m.Paged
	s.reg.mu.Unlock()
	if c.closed.Load() {
		s.reg.drop(c) // closed meanwhile: onClosed may have run before the put
		return
	}
	if !m.Paged {
		t := s.svc.RegistryTables()
		if m.Version == t.Version {
			c.sendRegistry(reqID, &wire.RegistryTables{Version: t.Version, Unchanged: true})
			return
		}
		c.sendUnpaged(reqID, s.wholeRegistryFrame(wire.TypeRegistryTables, reqID, t))
		return
	}
	snap := s.registrySnap()
	s.reg.mu.Lock()
	if sub := s.reg.subs[c]; sub != nil {
		sub.pin = snap
	}
	s.reg.mu.Unlock()
	if m.Version == snap.version {
		c.sendRegistry(reqID, &wire.RegistryTables{Version: snap.version, Unchanged: true, Paged: true})
		return
	}
	c.sendRegistry(reqID, &snap.pages[0])
}

// registryPage serves a later page of the version pinned for c.
func (c *conn) registryPage(reqID uint64, m *wire.SubscribeRegistry) {
	s := c.s
	s.reg.mu.Lock()
	var pin *regSnap
	if sub := s.reg.subs[c]; sub != nil {
		pin = sub.pin
	}
	s.reg.mu.Unlock()
	if pin == nil || pin.version != m.Version || int(m.Page) >= len(pin.pages) {
		c.Reply(reqID, wire.Response{Status: wire.StatusBadRequest, Msg: fmt.Sprintf(
			"registry tables: page %d of version %d is not served on this connection: ask for page 0", m.Page, m.Version)})
		return
	}
	c.sendRegistry(reqID, &pin.pages[m.Page])
}

// sendRegistry sends one reply of tables.
func (c *conn) sendRegistry(reqID uint64, t *wire.RegistryTables) {
	frame, err := registryFrame(wire.TypeRegistryTables, reqID, t)
	if err != nil {
		c.Reply(reqID, wire.Response{Status: wire.StatusError, Msg: "registry tables: " + err.Error()})
		return
	}
	c.sendRaw(frame)
}
