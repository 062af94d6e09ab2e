package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/gossip"
	"github.com/paxlock/paxlock/paxos"
)

// The node follows the cluster's member list, which group 0 replicates
// (group.Service.Members): when it changes, the peer transport
// adds, moves and removes links, the address book (client, TLS, admin
// addresses used by views, relays and redirects) is rebuilt, the view is
// published with the live members, and placement (g mod N) runs over the
// active members. Until the list is initialised (a new cluster, before
// group 0's first master installs it) the configured nodes are the list.

// addrBook maps node ids to their addresses; it is replaced, never
// modified.
type addrBook map[paxos.NodeID]NodeAddr

// addr returns node id's addresses (the zero NodeAddr if unknown).
func (s *Server) addr(id paxos.NodeID) NodeAddr {
	if b := s.book.Load(); b != nil {
		return (*b)[id]
	}
	return NodeAddr{}
}

// nodes returns the cluster's live nodes (joining, members, leaving),
// sorted by id.
func (s *Server) nodes() []NodeAddr {
	b := s.book.Load()
	if b == nil {
		return s.cfg.Nodes
	}
	out := make([]NodeAddr, 0, len(*b))
	for _, n := range *b {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodeAddr) int { return int(a.ID) - int(b.ID) })
	return out
}

// placementIDs returns the sorted ids placement spreads groups over.
func (s *Server) placementIDs() []uint32 {
	if p := s.placeIDs.Load(); p != nil {
		return *p
	}
	var ids []uint32
	for _, n := range s.cfg.Nodes {
		ids = append(ids, n.ID)
	}
	slices.Sort(ids)
	return ids
}

func nodeAddrOf(m group.Member) NodeAddr {
	return NodeAddr{ID: m.ID, Peer: m.Peer, Client: m.Client, ClientTLS: m.ClientTLS, Gossip: m.Gossip, Admin: m.Admin}
}

// selfMember is this node's record: its configured addresses, the admin
// address from admin_addr when its nodes entry has none.
func (s *Server) selfMember(st group.MemberState) group.Member {
	m := memberOf(s.cfg.self(), st)
	if m.Admin == "" {
		m.Admin = s.cfg.AdminAddr
	}
	m.Incarnation = s.incarnation
	return m
}

func memberOf(n NodeAddr, st group.MemberState) group.Member {
	return group.Member{ID: n.ID, State: st, Peer: n.Peer, Client: n.Client, ClientTLS: n.ClientTLS, Gossip: n.Gossip, Admin: n.Admin}
}

// membersChanged is group.Config.OnMembers: it runs on the host's
// loop, so it only signals followMembers.
func (s *Server) membersChanged() {
	select {
	case s.memCh <- struct{}{}:
	default:
	}
}

// followMembers applies every change of the member list until the node
// shuts down.
func (s *Server) followMembers() {
	for {
		select {
		case <-s.life.Done():
			return
		case <-s.memCh:
		}
		s.applyMembers()
	}
}

// applyMembers makes the transport, the address book, the view and
// placement follow the replicated member list. It is idempotent.
func (s *Server) applyMembers() {
	s.memApplyMu.Lock()
	defer s.memApplyMu.Unlock()
	list, init := s.svc.Members()
	if !init {
		return // the configured nodes, as set up by New
	}
	book := addrBook{}
	var active []uint32
	removed := map[uint32]bool{}
	for _, m := range list {
		if !m.Live() {
			removed[m.ID] = true
			continue
		}
		book[paxos.NodeID(m.ID)] = nodeAddrOf(m)
		if m.State == group.MemberActive {
			active = append(active, m.ID)
		}
	}
	self := paxos.NodeID(s.cfg.NodeID)
	if _, ok := book[self]; !ok && !removed[s.cfg.NodeID] {
		book[self] = nodeAddrOf(s.selfMember(group.MemberJoining)) // a joining node before its record applies
	}
	if removed[s.cfg.NodeID] {
		s.log.Error("this node was removed from the cluster; it serves nothing more and should be stopped", "node", s.cfg.NodeID)
	}
	old := addrBook{}
	if p := s.book.Load(); p != nil {
		old = *p
	}
	{
		for id := range old {
			if _, ok := book[id]; !ok {
				s.tr.RemovePeer(id)
				s.log.Info("peer removed from the cluster", "peer", id)
			}
		}
	}
	for id, n := range book {
		if id != self {
			if o, ok := old[id]; !ok || o.Peer != n.Peer {
				s.log.Info("peer address from the member list", "peer", id, "addr", n.Peer)
			}
			s.tr.SetPeer(id, n.Peer)
		}
	}
	for id := range removed {
		s.tr.RemovePeer(paxos.NodeID(id))
	}
	s.book.Store(&book)
	if len(active) > 0 {
		slices.Sort(active)
		if p := s.placeIDs.Load(); p == nil || !slices.Equal(*p, active) {
			s.placeIDs.Store(&active)
			s.log.Info("placement over the active members", "nodes", active)
			if n := len(active); n%2 == 0 {
				s.log.Warn("the cluster has an even number of members: it tolerates no more failures than one node fewer; add or remove one", "members", n, "tolerates", (n-1)/2)
			}
			s.place()
		}
	}
	s.publishView()
	s.recordIncarnations()
	s.resumeIfHalfDone()
}

// place names every group's preferred master: g mod N over the active
// members, or, with gossip, the sticky variant over the live ones.
func (s *Server) place() {
	if g := s.gossip.Load(); g != nil {
		g.replace()
		return
	}
	ids := s.placementIDs()
	for g, lg := range s.svc.Groups() {
		lg.SetPreferred(paxos.NodeID(gossip.PreferredMaster(g, ids)))
	}
}

// initMembers installs the configured nodes as the member list of a new
// cluster; it runs (in the background) when this node becomes master of
// group 0, and retries like initNamespaces.
func (s *Server) initMembers() {
	if !s.initingMem.CompareAndSwap(false, true) {
		return
	}
	defer s.initingMem.Store(false)
	var seed []group.Member
	for _, n := range s.cfg.Nodes {
		m := memberOf(n, group.MemberActive)
		if n.ID == s.cfg.NodeID {
			m = s.selfMember(group.MemberActive)
		}
		seed = append(seed, m)
	}
	s.seedSystem("the configured member list", s.svc.MembersInitialised, func(ctx context.Context) error {
		return s.svc.InitMembers(ctx, seed)
	})
}

// admitPeer is the transport's Admit: a peer whose id the member list
// has removed, or knows with another data directory (incarnation), is
// refused at the handshake, and so is one whose incarnation differs from
// the one this node recorded at its first connection (members_peers.go).
// The first incarnation a member presents is recorded in the list (by the
// master of group 0) when the list has none for it yet: the nodes of the
// configuration that seeded the list.
func (s *Server) admitPeer(id paxos.NodeID, inc uint64) error {
	m, ok := s.svc.Member(uint32(id))
	switch {
	case ok && !m.Live():
		return fmt.Errorf("node %d was removed from the cluster: %w", id, group.ErrMemberRemoved)
	case ok && inc != 0 && m.Incarnation != 0 && m.Incarnation != inc:
		return fmt.Errorf("node %d presents data directory %016x, the cluster knows %016x: %w", id, inc, m.Incarnation, group.ErrIncarnation)
	case inc == 0:
		return nil
	}
	if err := s.peerIncs.admit(id, inc); err != nil {
		return err
	}
	if ok && m.Incarnation == 0 {
		s.recordIncarnations()
	}
	return nil
}

// recordIncarnations records, on the master of group 0, the incarnation
// of every live member the list has none for and whose handshake (or, for
// this node, IDENTITY) told it, now or in an earlier run (PEERS): the nodes
// of the configuration that seeded the list. Idempotent; the work runs in the background.
func (s *Server) recordIncarnations() {
	if h := s.cfg.hooks; (h != nil && h.skipIncarnations.Load()) || !s.svc.Group(group.NamespaceGroup).Serving() {
		return
	}
	list, _ := s.svc.Members()
	for _, m := range list {
		if !m.Live() || m.Incarnation != 0 {
			continue
		}
		id := paxos.NodeID(m.ID)
		var inc uint64
		if m.ID == s.cfg.NodeID {
			inc = s.incarnation
		} else if v, ok := s.peerIncs.get(id); ok {
			inc = v
		}
		if inc == 0 {
			continue
		}
		if _, busy := s.recording.LoadOrStore(id, true); busy {
			continue
		}
		s.goBackground(func() {
			defer s.recording.Delete(id)
			ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
			defer cancel()
			if cur, ok := s.svc.Member(uint32(id)); ok && cur.Live() && cur.Incarnation == 0 {
				cur.Incarnation = inc
				if err := s.svc.PutMember(ctx, cur); err != nil {
					s.log.Debug("recording a member's incarnation", "node", id, "err", err)
				}
			}
		})
	}
}

// peerRefused is the transport's Refused: a peer refused this node (its
// id removed, its data directory not the one the cluster knows, another
// cluster). The node cannot take part: its peer transport is closed, and
// Failed reports why.
func (s *Server) peerRefused(peer paxos.NodeID, reason string) {
	s.failOnce.Do(func() {
		// Stop voting at once: a node refused for its data directory may
		// have forgotten promises, and peers that never heard from the
		// earlier directory would still take its votes. (Close waits for
		// the transport's goroutines, this caller among them.)
		s.goBackground(func() { _ = s.tr.Close() })
		err := fmt.Errorf("server: node %d refused this node: %s; a node whose data directory is new must join under a new id (paxlockd -join), and a removed id never comes back", peer, reason)
		s.log.Error("refused by the cluster; stopping", "peer", peer, "reason", reason)
		s.failed <- err
	})
}

// Failed delivers the reason the node cannot go on (a peer refused it),
// once; paxlockd exits on it.
func (s *Server) Failed() <-chan error { return s.failed }
