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
	if s.cfg.DrainTimeout < 0 || len(s.nodes()) < 2 || s.svc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.cfg.DrainTimeout))
	defer cancel()
	start := time.Now()
	g := s.gossip.Load()
	if g != nil {
		if err := g.m.MarkLeaving(ctx); err != nil {
			s.log.Warn("drain: the peers were not told that this node is leaving", "err", err)
		}
		g.place()
	}
	moved := s.drainReplicas()
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

// place points every group at the node placement gives it when this node
// is left out, so that the peer a draining replica prefers is the one
// placement would choose anyway.
func (g *nodeGossip) place() {
	self := g.s.cfg.NodeID
	g.mu.Lock()
	defer g.mu.Unlock()
	var live []uint32
	for _, id := range g.live {
		if _, placed := slices.BinarySearch(g.ids, id); placed && id != self {
			live = append(live, id)
		}
	}
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

// drainReplicas drains every replica of this node (host.Replica.Drain):
// each group it masters goes to a caught-up peer, the preferred one
// first, and it campaigns for none. It returns the groups this node
// mastered.
func (s *Server) drainReplicas() []int {
	self := paxos.NodeID(s.cfg.NodeID)
	var moved []int
	for i, lg := range s.svc.Groups() {
		rep := s.replica(i)
		if rep == nil {
			continue
		}
		if lg.Consensus().Status().Master == self {
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
