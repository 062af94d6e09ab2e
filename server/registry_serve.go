// This file serves the registry's tables (lock group 0 of a meta cluster,
// group/registry.go) to registry processes: SubscribeRegistry, answered
// with the tables, then a RegistryChanged push after every change.

package server

import (
	"sync"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/wire"
)

// regServe is the node's registry subscribers.
type regServe struct {
	ch   chan struct{} // wakes followRegistry (cap 1)
	mu   sync.Mutex
	subs map[*conn]struct{}
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

// followRegistry pushes the tables to the subscribers after every change
// until the node shuts down. Changes that come faster than a push are
// folded into the next one: a push carries the whole tables.
func (s *Server) followRegistry() {
	for {
		select {
		case <-s.life.Done():
			return
		case <-s.reg.ch:
		}
		s.reg.mu.Lock()
		subs := make([]*conn, 0, len(s.reg.subs))
		for c := range s.reg.subs {
			subs = append(subs, c)
		}
		s.reg.mu.Unlock()
		if len(subs) == 0 {
			continue
		}
		frame, err := registryFrame(wire.TypeRegistryChanged, 0, registryMessage(s.svc.RegistryTables()))
		if err != nil {
			s.log.Error("registry tables: encoding a push", "err", err)
			continue
		}
		for _, c := range subs {
			if !c.revoked.Load() {
				c.sendRaw(frame)
			}
		}
	}
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
// older ones, and a lagging node pushes the newer tables once it applies
// them. The subscriber is recorded before the tables are read, so no
// change falls between the reply and the first push.
func (c *conn) subscribeRegistry(reqID uint64, m *wire.SubscribeRegistry) {
	s := c.s
	ns := s.cfg.RegistryNamespace
	if ns == "" || c.sess.Identity().Namespace != ns || c.sess.Identity().Via != 0 {
		c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "only a session of the node's registry_namespace may subscribe to the registry tables"})
		return
	}
	s.reg.mu.Lock()
	if s.reg.subs == nil {
		s.reg.subs = map[*conn]struct{}{}
	}
	s.reg.subs[c] = struct{}{}
	s.reg.mu.Unlock()
	if c.closed.Load() {
		s.reg.drop(c) // closed meanwhile: onClosed may have run before the put
		return
	}
	t := s.svc.RegistryTables()
	msg := &wire.RegistryTables{Version: t.Version, Unchanged: true}
	if m.Version != t.Version {
		msg = registryMessage(t)
	}
	frame, err := registryFrame(wire.TypeRegistryTables, reqID, msg)
	if err != nil {
		c.Reply(reqID, wire.Response{Status: wire.StatusError, Msg: "registry tables: " + err.Error()})
		return
	}
	c.sendRaw(frame)
}
