package server

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/paxlock/paxlock/internal/gossip"
	"github.com/paxlock/paxlock/paxos"
)

// nodeGossip runs memberlist for the node: it advertises the node's addresses
// and the groups it masters, marks nodes alive or not in the view, and
// moves each group's placement hint to a live node. Membership is a hint
// for discovery and placement only; Paxos ballots, quorums and leases
// decide who is master.
type nodeGossip struct {
	s      *Server
	m      *gossip.Membership
	ids    []uint32 // the nodes placement uses, sorted (see replace)
	live   []uint32 // the live ones at the last change (under mu)
	dirty  chan struct{}
	stop   chan struct{}
	ctx    context.Context // ends at shutdown: bounds joins and updates
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine startGossip starts
	mu     sync.Mutex
	placed []paxos.NodeID
	// metaWait bounds how long publishing metadata waits for memberlist
	// to send it. The broadcast stays queued after the wait ends, so a
	// short wait loses nothing; it keeps a broadcast addressed to a peer
	// that has just left from holding the membership's operation slot,
	// which leaving at shutdown needs.
	metaWait time.Duration
	// up is who was alive at the last change (watch's goroutine only),
	// to log peers coming up and going down.
	up map[uint32]bool
}

func (s *Server) startGossip(ctx context.Context) error {
	self := s.cfg.self()
	if self.Gossip == "" {
		return nil
	}
	g := &nodeGossip{s: s, dirty: make(chan struct{}, 1), stop: make(chan struct{})}
	var seeds []string
	for _, n := range s.nodes() {
		if n.ID != s.cfg.NodeID && n.Gossip != "" {
			seeds = append(seeds, n.Gossip)
		}
	}
	g.ids = s.placementIDs()
	mcfg := gossip.MembershipConfig{
		NodeID: s.cfg.NodeID,
		Bind:   s.cfg.bindAddr(self.Gossip),
		Seeds:  seeds,
		Label:  s.cfg.ClusterName,
		Meta:   g.meta,
		Logger: s.log,
	}
	if s.cfg.BindHost != "" {
		mcfg.Advertise = self.Gossip
	}
	g.metaWait = 2 * time.Second // ten LAN gossip rounds
	if s.cfg.GossipTiming == GossipLocal {
		mcfg.Timing = gossip.FastTiming()
		g.metaWait = 10 * mcfg.Timing.GossipInterval
	}
	if k := s.sec.gossipKeys; len(k) > 0 {
		mcfg.SecretKey, mcfg.OldSecretKeys = k[0], k[1:]
	}
	m, err := gossip.NewMembership(mcfg)
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	g.m = m
	s.gossip.Store(g)
	changes, _ := m.Subscribe()
	g.ctx, g.cancel = context.WithCancel(s.life)
	g.wg.Add(3)
	go g.watch(changes)
	go g.publishMeta()
	go func() {
		defer g.wg.Done()
		// The first node up has nobody to join; Start keeps retrying.
		jctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
		defer cancel()
		_, _ = m.Join(jctx, seeds)
	}()
	return nil
}

// meta is what this node gossips: its addresses and the groups it
// masters with their epochs.
func (g *nodeGossip) meta() gossip.NodeMeta {
	self := g.s.cfg.self()
	meta := gossip.NodeMeta{ID: self.ID, ClientAddr: self.Client, PeerAddr: self.Peer}
	g.s.viewMu.Lock()
	for i, st := range g.s.masters {
		if st.Master == paxos.NodeID(self.ID) {
			meta.Groups = append(meta.Groups, gossip.GroupEpoch{Group: i, Epoch: st.Ballot.Round})
		}
	}
	g.s.viewMu.Unlock()
	return meta
}

// mastersChanged asks for the metadata to be gossiped again (coalesced).
func (g *nodeGossip) mastersChanged() {
	select {
	case g.dirty <- struct{}{}:
	default:
	}
}

func (g *nodeGossip) publishMeta() {
	defer g.wg.Done()
	for {
		select {
		case <-g.stop:
			return
		case <-g.dirty:
		}
		ctx, cancel := context.WithTimeout(g.ctx, g.metaWait)
		_ = g.m.UpdateMeta(ctx, g.meta())
		cancel()
		// At most ten updates a second.
		select {
		case <-g.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch follows membership changes: alive flags for the view, and the
// placement hint of every group.
func (g *nodeGossip) watch(changes <-chan struct{}) {
	defer g.wg.Done()
	for {
		select {
		case <-g.stop:
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
		}
		members := g.m.Members()
		alive := map[uint32]bool{}
		for _, mb := range members {
			if mb.State == gossip.StateAlive {
				alive[mb.ID] = true
			}
		}
		g.logPeers(members, alive)
		g.s.setAlive(alive)
		g.mu.Lock()
		g.live = gossip.LiveIDs(members)
		g.placeLocked()
		g.mu.Unlock()
	}
}

// replace takes the nodes placement uses again from the server (the
// member list changed) and places the groups over them.
func (g *nodeGossip) replace() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ids = g.s.placementIDs()
	g.placeLocked()
}

// placeLocked names each group's preferred master: its place among ids,
// kept while that node is live (StickyPreferredMaster). Only nodes of ids
// are chosen.
func (g *nodeGossip) placeLocked() {
	var live []uint32
	for _, id := range g.live {
		if _, ok := slices.BinarySearch(g.ids, id); ok {
			live = append(live, id)
		}
	}
	if g.live == nil {
		return // no news from gossip yet
	}
	for i, lg := range g.s.svc.Groups() {
		p := paxos.NodeID(gossip.StickyPreferredMaster(i, g.ids, live))
		if i >= len(g.placed) {
			g.placed = append(g.placed, 0)
		}
		if p != 0 && p != g.placed[i] {
			g.placed[i] = p
			lg.SetPreferred(p)
		}
	}
}

// logPeers logs the peers that came up (at info level) and went down (at
// warn level, with the state membership has for them) since the last
// change. A peer never seen up is not logged as down.
func (g *nodeGossip) logPeers(members []gossip.Member, alive map[uint32]bool) {
	self := g.s.cfg.NodeID
	g.mu.Lock()
	ids := g.ids
	g.mu.Unlock()
	for _, id := range ids {
		if id == self || alive[id] == g.up[id] {
			continue
		}
		if alive[id] {
			g.s.log.Info("peer up", "peer", id)
			continue
		}
		state := "gone"
		for _, mb := range members {
			if mb.ID == id {
				state = mb.State.String()
			}
		}
		g.s.log.Warn("peer down", "peer", id, "state", state)
	}
	g.up = alive
}

func (g *nodeGossip) shutdown(ctx context.Context) error {
	close(g.stop)
	defer g.cancel()
	// Tell the others we are leaving (so they see Left, not Dead), but do
	// not hold a shutdown up for long on it.
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	if err := g.m.Leave(lctx); err != nil {
		// The others may be gone already; they will see us dead instead.
		g.s.log.Debug("gossip leave", "err", err)
	}
	cancel()
	g.wg.Wait()
	return g.m.Stop()
}
