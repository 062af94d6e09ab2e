package server

import (
	"context"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// groupMembers returns every group's acceptor set as this node sees it.
func (s *Server) groupMembers() []adminapi.GroupMembers {
	var out []adminapi.GroupMembers
	for g, lg := range s.svc.Groups() {
		gm := adminapi.GroupMembers{Group: g, Master: uint32(lg.Consensus().Status().Master)}
		if rep := s.replica(group.ID(g)); rep != nil {
			ms := rep.Membership()
			for _, id := range ms.Current.Members {
				gm.Members = append(gm.Members, uint32(id))
			}
			for _, id := range ms.Current.Removed {
				gm.Removed = append(gm.Removed, uint32(id))
			}
			if ms.Pending != nil {
				gm.Pending = ms.Pending.String()
			}
		}
		out = append(out, gm)
	}
	return out
}

// MembersReport returns the member list and every group's acceptors.
func (s *Server) MembersReport() adminapi.MembersReport {
	list, _ := s.svc.Members()
	if list == nil {
		for _, n := range s.nodes() {
			list = append(list, memberOf(n, group.MemberActive))
		}
	}
	return adminapi.MembersReport{Cluster: s.cfg.ClusterName, Members: list, Groups: s.groupMembers()}
}

// awaitSystemMaster waits, within ctx and MemberChangeTimeout, until this
// node serves group 0 or knows a master of it that is reachable (its peer
// link is up): right after a master dies, the others still name it until
// its lease ends and a successor is elected, and a request sent there
// would fail. It returns the master and whether one was found (else the
// last one named).
func (s *Server) awaitSystemMaster(ctx context.Context) (paxos.NodeID, bool) {
	var m paxos.NodeID
	ok := waitUntil(ctx, MemberChangeTimeout, func() bool {
		if s.svc.Group(group.NamespaceGroup).Serving() {
			m = paxos.NodeID(s.cfg.NodeID)
			return true
		}
		m = s.svc.SystemMaster()
		return m != 0 && m != paxos.NodeID(s.cfg.NodeID) && s.peerUp(m)
	})
	return m, ok
}

// peerUp reports whether this node's link to peer id is up.
func (s *Server) peerUp(id paxos.NodeID) bool {
	if id == paxos.NodeID(s.cfg.NodeID) {
		return true
	}
	for _, p := range s.tr.Peers() {
		if p.ID == id {
			return p.Up
		}
	}
	return false
}

// waitUntil polls cond until it holds (true) or d or ctx ends (false).
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
