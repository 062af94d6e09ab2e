package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/gossip"
	"github.com/paxlock/paxlock/paxos"
)

// drain hands every group this node masters to a live peer before the
// node stops, so that a planned stop (SIGTERM, a rolling restart) costs
// the clients of those groups a redirect instead of a failover: without
// it, the groups answer NO_MASTER until their leases run out and a
// successor is elected. It tells the peers that this node is leaving (so
// that placement stops choosing it and nobody hands a group back), moves
// each group it masters to a caught-up peer, where placement puts it
// without this node if that one has caught up (a mastership transfer: the
// successor campaigns at once and recovers every chosen instance in its
// phase 1, so held locks, tokens and deadlines carry over as on any master
// change), and waits, within Config.DrainTimeout, until a successor
// masters each of them. The view pushes that follow send clients to the
// successors while this node still answers, with redirects, on its old
// connections. When every peer is stopping too (a stop of the whole
// cluster), it stops waiting as soon as gossip says so.
func (s *Server) drain(ctx context.Context) {
	if s.cfg.DrainTimeout < 0 {
		return
	}
	d := s.handOverAll(ctx)
	switch {
	case len(d.Groups) == 0:
	case d.Served:
		s.log.Info("drained: every group this node mastered is served by a peer", "groups", d.Groups, "took_ms", d.TookMs)
	case d.Reason == errNoPeerLeft.Error():
		s.log.Info("drain: no live peer to hand the groups to (every peer is stopping or gone)", "groups", d.Groups)
	default:
		s.log.Warn("drain: groups not handed over in time; they fail over when their leases run out",
			"groups", d.Groups, "waited_ms", d.TookMs, "err", d.Reason)
	}
}

// handOverAll is drain's work, also what POST /drain does: it waits
// within Config.DrainTimeout (10 s when negative) and reports what it did.
func (s *Server) handOverAll(ctx context.Context) adminapi.Drained {
	d := adminapi.Drained{Node: s.cfg.NodeID, Groups: []int{}}
	if len(s.nodes()) < 2 || s.svc == nil {
		d.Reason = "no peer to hand a group to"
		return d
	}
	limit := time.Duration(s.cfg.DrainTimeout)
	if limit <= 0 {
		limit = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	// The groups to wait for are those mastered now: placement may hand
	// some over by itself once it leaves this node out.
	d.Groups = append(d.Groups, s.mastered()...)
	g := s.gossip.Load()
	if g != nil && len(g.livePeers()) == 0 {
		d.Reason = errNoPeerLeft.Error()
		return d
	}
	if g != nil {
		if err := g.m.MarkLeaving(ctx); err != nil {
			s.log.Warn("drain: the peers were not told that this node is leaving", "err", err)
		}
		g.place()
	}
	s.drainReplicas()
	err := s.waitMastered(ctx, d.Groups, g)
	d.TookMs = time.Since(start).Milliseconds()
	if err != nil {
		d.Reason = err.Error()
		return d
	}
	d.Served = true
	return d
}

// place points every group at the node placement gives it when this node
// is left out, so that the peer a draining replica prefers is the one
// placement would choose anyway.
func (g *nodeGossip) place() {
	live := g.livePeers()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(live) == 0 {
		return
	}
	for i, lg := range g.s.svc.Groups() {
		p := paxos.NodeID(gossip.StickyPreferredMaster(i, g.ids, live))
		if p == 0 {
			continue
		}
		for len(g.placed) <= i {
			g.placed = append(g.placed, 0)
		}
		g.placed[i] = p
		lg.SetPreferred(p)
	}
}

// mastered returns the groups this node masters.
func (s *Server) mastered() []int {
	self := paxos.NodeID(s.cfg.NodeID)
	var out []int
	for i, lg := range s.svc.Groups() {
		if lg.Consensus().Status().Master == self {
			out = append(out, i)
		}
	}
	return out
}

// livePeers returns the other nodes placement uses that gossip says are
// live and not leaving, from the membership's current table.
func (g *nodeGossip) livePeers() []uint32 {
	self := g.s.cfg.NodeID
	g.mu.Lock()
	ids := g.ids
	g.mu.Unlock()
	var live []uint32
	for _, id := range gossip.LiveIDs(g.m.Members()) {
		if _, placed := slices.BinarySearch(ids, id); placed && id != self {
			live = append(live, id)
		}
	}
	return live
}

// drainReplicas drains every replica of this node (host.Replica.Drain):
// each group it masters goes to a caught-up peer, the preferred one
// first, and it campaigns for none.
func (s *Server) drainReplicas() {
	for i := range s.svc.Groups() {
		if rep := s.replica(group.ID(i)); rep != nil {
			rep.Drain()
		}
	}
}

// errDrainMajority refuses a drain after which fewer than a quorum of the
// nodes could master a group: losing one more node would then leave
// groups without a master although a quorum of nodes is up.
var errDrainMajority = errors.New("drain refused: fewer than a quorum of the nodes would be left to master the groups (the others are draining, leaving or down)")

// drainLeavesQuorum refuses draining this node when the peers gossip says
// are live and not leaving fall short of a quorum of the nodes.
func (s *Server) drainLeavesQuorum() error {
	g := s.gossip.Load()
	n := len(s.nodes())
	if g == nil || n < 2 {
		return nil
	}
	if live := len(g.livePeers()); live < n/2+1 {
		return fmt.Errorf("%w: %d of %d nodes could master after it, a quorum is %d", errDrainMajority, live, n, n/2+1)
	}
	return nil
}

// errNoPeerLeft ends a drain whose peers are all leaving or gone.
var errNoPeerLeft = errors.New("no live peer to take the groups (gossip shows every peer leaving or gone)")

// waitMastered waits until another node masters each of groups, as this
// node sees it, or ctx ends, or (when the node gossips, g) no peer is
// live any more: in a stop of the whole cluster every node drains at
// once, and nobody is left to take the groups.
func (s *Server) waitMastered(ctx context.Context, groups []int, g *nodeGossip) error {
	self := paxos.NodeID(s.cfg.NodeID)
	var members <-chan struct{}
	if g != nil {
		ch, cancel := g.m.Subscribe()
		defer cancel()
		members = ch
	}
	for {
		s.viewMu.Lock()
		news := s.masterNews
		done := true
		for _, g := range groups {
			if m := s.masters[g].Master; m == 0 || m == self {
				done = false
			}
		}
		s.viewMu.Unlock()
		if done {
			return nil
		}
		if g != nil && len(g.livePeers()) == 0 {
			return errNoPeerLeft
		}
		select {
		case <-news:
		case <-members:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// undrain undoes a drain (POST /drain) of this node without a restart
// (DELETE /drain). The node says in gossip that it is no longer leaving,
// its replicas campaign again (host.Replica.Undrain), and placement gives
// it back its groups as it does a node that returns. The adminapi.Drained
// has Groups empty and Served true once the peers were told; an error: a
// node that does not gossip, whose placement has nothing to undo.
func (s *Server) undrain(ctx context.Context) (adminapi.Drained, error) {
	g := s.gossip.Load()
	if g == nil {
		return adminapi.Drained{}, errors.New("undrain: this node does not gossip (no gossip address): its replicas were not drained by placement")
	}
	d := adminapi.Drained{Node: s.cfg.NodeID, Groups: []int{}}
	start := time.Now()
	if err := g.m.UnmarkLeaving(ctx); err != nil {
		d.Reason = err.Error()
	} else {
		d.Served = true
	}
	for i := range s.svc.Groups() {
		if rep := s.replica(group.ID(i)); rep != nil {
			rep.Undrain()
		}
	}
	g.mu.Lock()
	g.live = gossip.LiveIDs(g.m.Members())
	g.placeLocked()
	g.mu.Unlock()
	d.TookMs = time.Since(start).Milliseconds()
	return d, nil
}
