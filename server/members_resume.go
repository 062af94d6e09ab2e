package server

import (
	"context"
	"time"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// resumeTimeout bounds one resumed change (resumeMemberChange).
const resumeTimeout = 2 * time.Minute

// resumeMemberChanges finishes, while this node masters group 0, every
// change the member list shows half-done: a node joining is added (once
// it is reachable), a node leaving is removed (unless it is this node:
// group 0 then moves, and its next master finishes). It retries with
// backoff until none is left, this node stops mastering group 0, or it
// shuts down. One loop runs at a time; onMaster and applyMembers start
// it.
func (s *Server) resumeMemberChanges() {
	if !s.resuming.CompareAndSwap(false, true) {
		return
	}
	defer func() {
		s.resuming.Store(false)
		s.resumeIfHalfDone() // a change recorded as this loop ended
	}()
	wait := 200 * time.Millisecond
	unreachable := map[uint32]bool{} // joining nodes logged as down
	for s.svc.Group(group.NamespaceGroup).Serving() {
		list, _ := s.svc.Members()
		left := false
		for _, m := range list {
			if m.State != group.MemberJoining && m.State != group.MemberLeaving {
				continue
			}
			if m.State == group.MemberLeaving && m.ID == s.cfg.NodeID {
				continue // group 0 moves away; its next master finishes
			}
			left = true
			if m.State == group.MemberJoining && !s.peerUp(paxos.NodeID(m.ID)) {
				if !unreachable[m.ID] {
					unreachable[m.ID] = true
					s.log.Warn("a half-done add waits for its node to be reachable; start it, or remove it (paxlockctl member remove)", "node", m.ID)
				}
				continue
			}
			delete(unreachable, m.ID)
			if err := s.resumeMemberChange(m.ID); err != nil {
				s.log.Warn("resuming a member change: not done yet; retrying", "node", m.ID, "err", err)
			}
		}
		if !left {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-s.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// resumeMemberChange runs node id's change again, as the list shows it
// now (joining: AddMember, leaving: RemoveMember), with this node's admin
// token for the other groups' masters. Nil when there was nothing to do or
// it is done.
func (s *Server) resumeMemberChange(id uint32) error {
	select { // an operator's change in progress ends within its request's life
	case s.memChange <- struct{}{}:
		defer func() { <-s.memChange }()
	case <-s.life.Done():
		return s.life.Err()
	}
	ctx, cancel := context.WithTimeout(s.life, resumeTimeout)
	defer cancel()
	auth := ""
	if s.sec.adminToken != "" {
		auth = "Bearer " + s.sec.adminToken
	}
	cur, ok := s.svc.Member(id)
	var op string
	var err error
	switch {
	case ok && cur.State == group.MemberJoining:
		op = "add"
		s.log.Info("resuming a half-done member change", "op", op, "node", id)
		_, err = s.AddMember(ctx, cur, auth)
	case ok && cur.State == group.MemberLeaving && id != s.cfg.NodeID:
		op = "remove"
		s.log.Info("resuming a half-done member change", "op", op, "node", id)
		_, err = s.RemoveMember(ctx, id, auth)
	default:
		return nil // done meanwhile
	}
	s.auditResumed(op, id, err)
	if err != nil {
		return err
	}
	s.log.Info("member change done", "op", op, "node", id, "resumed", true)
	return nil
}

// resumeIfHalfDone starts resumeMemberChanges when this node masters group
// 0 and the list has a node joining or leaving.
func (s *Server) resumeIfHalfDone() {
	if s.resuming.Load() || !s.svc.Group(group.NamespaceGroup).Serving() {
		return
	}
	list, _ := s.svc.Members()
	for _, m := range list {
		if m.State == group.MemberJoining || m.State == group.MemberLeaving {
			s.goBackground(s.resumeMemberChanges)
			return
		}
	}
}
