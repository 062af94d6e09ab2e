package server

import (
	"fmt"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// ReadyMaxLag is how many chosen instances a follower may have left to
// apply and still count as following its group's master closely enough
// for /readyz.
const ReadyMaxLag = 1000

// Ready reports whether this node is ready to take its share of the
// cluster's work, and if not, why, in one short line: the membership
// layer counts a majority of the members alive (this node included), and
// no group stopped on a failure (host.Replica.Err; /status shows it as
// ready_reason), and every group has a master this node knows of that is alive, with this
// node either that master and serving (holding its lease) or a follower
// with at most ReadyMaxLag chosen instances left to apply.
func (s *Server) Ready() (bool, string) {
	if why := s.listeners.notAccepting(); why != "" {
		return false, why
	}
	v := s.view.Load()
	alive := 0
	for _, n := range v.Nodes {
		if n.Alive {
			alive++
		}
	}
	if len(v.Nodes) > 0 && alive <= len(v.Nodes)/2 {
		return false, fmt.Sprintf("no quorum: %d of %d nodes alive", alive, len(v.Nodes))
	}
	aliveNode := func(id paxos.NodeID) bool {
		for _, n := range v.Nodes {
			if n.ID == uint32(id) {
				return n.Alive
			}
		}
		return false
	}
	self := paxos.NodeID(s.cfg.NodeID)
	for g, lg := range s.svc.Groups() {
		// A group stopped on a failure (a snapshot install or its load)
		// serves nothing on this node until it restarts.
		if r := s.replica(group.ID(g)); r != nil {
			if err := r.Err(); err != nil {
				return false, fmt.Sprintf("group %d: stopped: %v", g, err)
			}
		}
		st := lg.Consensus().Status()
		switch {
		case st.Master == 0:
			return false, fmt.Sprintf("group %d: no master known", g)
		case st.Master == self:
			if !st.Serving {
				return false, fmt.Sprintf("group %d: this node is master (ballot %s) but not serving yet", g, st.Ballot)
			}
		default:
			if !aliveNode(st.Master) {
				return false, fmt.Sprintf("group %d: master node %d is not alive", g, st.Master)
			}
			if c, a, _ := lg.Consensus().Progress(); c > a && c-a > ReadyMaxLag {
				return false, fmt.Sprintf("group %d: %d chosen instances not yet applied (at most %d)", g, c-a, ReadyMaxLag)
			}
		}
	}
	return true, "ready"
}
