// This file is the registry's tables: the clusters it follows, each
// namespace's cluster, epoch and verifier, from the static configuration
// or from the meta cluster, and what a change of them does to the
// clusters followed and the connections served.

package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// nsEntry is a namespace's entry in the tables.
type nsEntry struct {
	cl    *clusterState
	epoch uint64
	v     scramauth.Verifier // never logged
}

// stamped returns v with the version a namespace of epoch epoch is
// served (wire.RegistryViewVersion): v itself for epoch 0.
func stamped(v *wire.View, epoch uint64) *wire.View {
	if epoch == 0 {
		return v
	}
	out := *v
	out.Version = wire.RegistryViewVersion(epoch, v.Version)
	return &out
}

// verifierOf is a namespace's verifier as the tables carry it.
func verifierOf(n wire.RegistryNamespace) scramauth.Verifier {
	return scramauth.Verifier{Iters: int(n.Iters), Salt: []byte(n.Salt), StoredKey: []byte(n.StoredKey), ServerKey: []byte(n.ServerKey)}
}

// staticTables builds the tables of a static configuration: epoch 0 for
// every namespace (the views keep their clusters' versions), verifiers
// derived from the configured secrets.
func staticTables(cfg StandaloneConfig) (*wire.RegistryTables, error) {
	t := &wire.RegistryTables{}
	for name, addrs := range cfg.Clusters {
		t.Clusters = append(t.Clusters, wire.RegistryCluster{Name: name, Client: slices.Clone(addrs)})
	}
	for ns, cl := range cfg.Namespaces {
		v, err := scramauth.NewVerifier(cfg.Secrets[ns])
		if err != nil {
			return nil, fmt.Errorf("registry: namespace %q: %w", ns, err)
		}
		t.Namespaces = append(t.Namespaces, wire.RegistryNamespace{Name: ns, Cluster: cl,
			Iters: uint32(v.Iters), Salt: string(v.Salt), StoredKey: string(v.StoredKey), ServerKey: string(v.ServerKey)})
	}
	slices.SortFunc(t.Clusters, func(a, b wire.RegistryCluster) int { return strings.Compare(a.Name, b.Name) })
	return t, nil
}

// applyTables makes t the registry's tables: it starts following the
// clusters that are new, stops following those that left, gives the
// followed ones their new seed addresses, and then looks at every client
// connection: one whose namespace left the tables or whose verifier
// changed is closed (its client authenticates again), and a subscription
// whose namespace changed cluster or epoch moves to the new cluster with
// its view pushed at once. The verifier installer is woken.
func (s *Standalone) applyTables(t *wire.RegistryTables) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	s.mu.Lock()
	started := s.started && !s.closed
	s.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range t.Clusters {
		seen[c.Name] = true
		if cl := s.clusters[c.Name]; cl != nil {
			cl.mu.Lock()
			cl.addrs = slices.Clone(c.Client)
			cl.mu.Unlock()
			continue
		}
		cl := s.newClusterState(c.Name, c.Client)
		s.clusters[c.Name] = cl
		if started {
			s.wg.Add(1)
			go s.follow(cl)
		}
	}
	for name, cl := range s.clusters {
		if !seen[name] {
			cl.cancel()
			delete(s.clusters, name)
		}
	}
	s.nsMap = make(map[string]nsEntry, len(t.Namespaces))
	for _, n := range t.Namespaces {
		if cl := s.clusters[n.Cluster]; cl != nil {
			s.nsMap[n.Name] = nsEntry{cl: cl, epoch: n.Epoch, v: verifierOf(n)}
		}
	}
	s.tables = t
	s.mu.Lock()
	conns := make([]*rconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		s.recheckLocked(c)
	}
	s.inst.kick()
	s.moves.kick()
}

// recheckLocked applies the tables to one connection (see applyTables);
// s.tmu is held.
func (s *Standalone) recheckLocked(c *rconn) {
	c.mu.Lock()
	ns, v, sub := c.ns, c.v, c.sub
	c.mu.Unlock()
	if ns == "" {
		return
	}
	e, ok := s.nsMap[ns]
	if !ok || !e.v.Equal(v) {
		s.log.Info("registry: closing a client connection: its namespace left the registry or its secret changed", "namespace", ns)
		c.kill()
		return
	}
	if sub == nil {
		return
	}
	sub.mu.Lock()
	epoch, subscribed := sub.subs[c]
	if sub == e.cl && epoch == e.epoch || !subscribed {
		sub.mu.Unlock()
		return
	}
	delete(sub.subs, c)
	sub.mu.Unlock()
	cl := e.cl
	cl.mu.Lock()
	defer cl.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.sub != sub {
		return // closed or resubscribed meanwhile
	}
	c.sub = cl
	cl.subs[c] = e.epoch
	if cl.view == nil {
		return // the cluster's first view will be pushed
	}
	frame, err := wire.AppendFrame(nil, wire.TypeViewChanged, 0, stamped(cl.view, e.epoch))
	if err != nil {
		s.log.Error("registry: encoding a view", "cluster", cl.name, "err", err)
		return
	}
	c.enqueueLocked(frame)
	s.log.Info("registry: namespace changed cluster, pushing its view", "namespace", ns, "cluster", cl.name, "epoch", e.epoch)
}

// Tables returns a copy of the tables the registry serves (nil before
// any); it holds the namespaces' verifiers.
func (s *Standalone) Tables() *wire.RegistryTables {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	if s.tables == nil {
		return nil
	}
	t := *s.tables
	t.Clusters = slices.Clone(t.Clusters)
	t.Namespaces = slices.Clone(t.Namespaces)
	t.Moves = slices.Clone(t.Moves)
	return &t
}

// tablesVersion is the version of the tables the registry has (0 before
// any, and for static tables).
func (s *Standalone) tablesVersion() uint64 {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	if s.tables == nil {
		return 0
	}
	return s.tables.Version
}
