package server

import (
	"context"
	"fmt"
	"slices"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// onMaster records a group's mastership change and publishes a new view.
func (s *Server) onMaster(g group.ID, st paxos.SoftState) {
	s.viewMu.Lock()
	old := s.masters[g]
	if st.Master == 0 && old.Master != 0 && st.Ballot == old.Ballot {
		// Stepped down without news of a successor: keep pointing clients
		// at the last master until the next one is known.
		s.masters[g] = paxos.SoftState{Ballot: st.Ballot}
	} else {
		s.masters[g] = st
	}
	changed := s.masters[g].Master != old.Master || s.masters[g].Ballot != old.Ballot
	if changed {
		if s.masterNews != nil {
			close(s.masterNews)
		}
		s.masterNews = make(chan struct{})
	}
	s.viewMu.Unlock()
	if changed {
		s.masterLog.record(g, st)
	}
	if g == group.NamespaceGroup && st.Serving {
		s.goBackground(s.initNamespaces) // nothing to do once shutting down
		if !s.svc.MembersInitialised() {
			s.goBackground(s.initMembers)
		} else {
			s.goBackground(s.recordIncarnations)
			s.goBackground(s.resumeIfHalfDone)
		}
	}
	if changed {
		s.publishView()
		if g := s.gossip.Load(); g != nil {
			g.mastersChanged()
		}
	}
}

// setAlive records which nodes gossip says are alive and publishes the
// view if a flag changed (the version rises with it, see
// rebuildViewLocked).
func (s *Server) setAlive(alive map[uint32]bool) {
	s.viewMu.Lock()
	s.alive = alive
	s.viewMu.Unlock()
	s.publishView()
}

// publishView rebuilds the view and pushes it to subscribers if it changed.
func (s *Server) publishView() {
	s.viewMu.Lock()
	old := s.view.Load()
	v := s.rebuildViewLocked()
	if v == old {
		s.viewMu.Unlock()
		return // nothing changed
	}
	tv := s.tlsView.Load() // built with v
	subs := make([]*conn, 0, len(s.subs))
	for c := range s.subs {
		subs = append(subs, c)
	}
	s.viewMu.Unlock()
	for _, c := range subs {
		if c.tlsPort {
			c.Push(tv)
		} else {
			c.Push(v)
		}
	}
}

// rebuildView rebuilds the view without publishing it (see
// rebuildViewLocked).
func (s *Server) rebuildView() {
	s.viewMu.Lock()
	s.rebuildViewLocked()
	s.viewMu.Unlock()
}

// viewSeqBits is how many low bits of a view's version count the changes
// made while the sum of ballot rounds stayed (see rebuildViewLocked).
const (
	viewSeqBits = 16
	viewSeqMask = 1<<viewSeqBits - 1
)

// rebuildViewLocked builds the view from the groups' mastership and the
// alive flags. Its version rises with every change of either: the high
// bits are the sum of the groups' ballot rounds (which only grows, and
// orders the views of different nodes: a node that knows of a later
// election has a higher sum), the low viewSeqBits count the changes since
// the sum last rose. The sum alone did not rise when only a flag, or a
// master within a known ballot, changed, and clients ignored such a view;
// a counter alone would let a node whose flags flapped outrank a node
// that knows newer masters. A rebuild that changes nothing keeps the
// version.
func (s *Server) rebuildViewLocked() *wire.View {
	v := &wire.View{Groups: make([]wire.GroupView, len(s.masters))}
	for g, st := range s.masters {
		v.Version += st.Ballot.Round
		gv := wire.GroupView{Master: uint32(st.Master), Epoch: st.Ballot.Round}
		if st.Master != 0 {
			gv.Addr = s.addr(st.Master).Client
		}
		v.Groups[g] = gv
	}
	v.Version <<= viewSeqBits
	for _, n := range s.nodes() {
		alive := s.alive == nil || s.alive[n.ID] || n.ID == s.cfg.NodeID
		v.Nodes = append(v.Nodes, wire.NodeView{ID: n.ID, Addr: n.Client, Alive: alive})
	}
	if old := s.view.Load(); old != nil {
		if slices.Equal(old.Groups, v.Groups) && slices.Equal(old.Nodes, v.Nodes) {
			return old
		}
		switch {
		case v.Version > old.Version: // the sum rose
		case old.Version&viewSeqMask != viewSeqMask:
			v.Version = old.Version + 1
		default:
			v.Version = old.Version // 65535 changes within one sum: saturated
		}
	}
	s.view.Store(v)
	s.tlsView.Store(s.withTLSAddrs(v))
	return v
}

// withTLSAddrs returns v with the nodes' TLS client addresses in place of
// their plain ones ("" for a node without client_tls_addr): the view a
// client of the TLS listener is served, so that it stays on TLS.
func (s *Server) withTLSAddrs(v *wire.View) *wire.View {
	t := &wire.View{Version: v.Version, Groups: slices.Clone(v.Groups), Nodes: slices.Clone(v.Nodes)}
	for i := range t.Groups {
		if m := t.Groups[i].Master; m != 0 {
			t.Groups[i].Addr = s.addr(paxos.NodeID(m)).ClientTLS
		}
	}
	for i := range t.Nodes {
		t.Nodes[i].Addr = s.addr(paxos.NodeID(t.Nodes[i].ID)).ClientTLS
	}
	return t
}

// subscribe adds c to the view's subscribers (on), which publishView
// pushes every new view to, or removes it.
func (s *Server) subscribe(c *conn, on bool) {
	s.viewMu.Lock()
	if on {
		s.subs[c] = struct{}{}
	} else {
		delete(s.subs, c)
	}
	s.viewMu.Unlock()
}

// WaitReady waits until every group has a master that this node knows.
func (s *Server) WaitReady(ctx context.Context) error {
	for {
		s.viewMu.Lock()
		news := s.masterNews
		ready := true
		for _, st := range s.masters {
			if st.Master == 0 {
				ready = false
			}
		}
		s.viewMu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server: waiting for masters: %w", ctx.Err())
		case <-news:
		}
	}
}

// View returns the node's current cluster view.
func (s *Server) View() *wire.View { return s.view.Load() }
