package server

import (
	"context"
	"slices"
	"time"

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
// change), and waits, within
// Config.DrainTimeout, until a successor masters each of them. The view
// pushes that follow send clients to the successors while this node
// still answers, with redirects, on its old connections.
func (s *Server) drain(ctx context.Context) {
	g := s.gossip.Load()
	if g == nil || s.cfg.DrainTimeout < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.cfg.DrainTimeout))
	defer cancel()
	start := time.Now()
	if err := g.m.MarkLeaving(ctx); err != nil {
		s.log.Warn("drain: the peers were not told that this node is leaving", "err", err)
	}
	moved := g.handOver()
	if len(moved) == 0 {
		return
	}
	if err := s.waitMastered(ctx, moved); err != nil {
		s.log.Warn("drain: groups not handed over in time; they fail over when their leases run out",
			"groups", moved, "waited", time.Since(start).Round(time.Millisecond), "err", err)
		return
	}
	s.log.Info("drained: every group this node mastered is served by a peer",
		"groups", moved, "took", time.Since(start).Round(time.Millisecond))
}

// handOver points every group at the node placement gives it when this
// node is left out, and drains this node's replicas: each group this node
// masters goes to a caught-up peer, the placement's choice first
// (host.Replica.Drain), and this node campaigns for none. It returns the
// groups this node mastered; none, and it drains nothing, when no peer is
// live.
func (g *nodeGossip) handOver() []int {
	self := g.s.cfg.NodeID
	g.mu.Lock()
	var live []uint32
	for _, id := range g.live {
		if _, placed := slices.BinarySearch(g.ids, id); placed && id != self {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		g.mu.Unlock()
		return nil // nobody to hand a group to
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
	g.mu.Unlock()
	var moved []int
	for i, lg := range g.s.svc.Groups() {
		rep := g.s.replica(i)
		if rep == nil {
			continue
		}
		if lg.Consensus().Status().Master == paxos.NodeID(self) {
			moved = append(moved, i)
		}
		rep.Drain()
	}
	return moved
}

// waitMastered waits until another node masters each of groups, as this
// node sees it, or ctx ends.
func (s *Server) waitMastered(ctx context.Context, groups []int) error {
	self := paxos.NodeID(s.cfg.NodeID)
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
		select {
		case <-news:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
