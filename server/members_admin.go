package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// resumeNote is adminapi.MemberChangeError.Next.
const resumeNote = "the master of group 0 finishes the change on its own once the pending groups have a quorum (an add waits until the new node is reachable); GET /members shows the progress; running the change again also finishes it"

// groupMembers returns every group's acceptor set as this node sees it.
func (s *Server) groupMembers() []adminapi.GroupMembers {
	var out []adminapi.GroupMembers
	for g, lg := range s.svc.Groups() {
		gm := adminapi.GroupMembers{Group: g, Master: uint32(lg.Consensus().Status().Master)}
		if rep := s.replica(g); rep != nil {
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

// membersHandler serves GET and POST /members.
func (s *Server) membersHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, s.MembersReport())
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "use GET, or POST {\"id\": ..., \"peer\": ..., \"client\": ...}", http.StatusMethodNotAllowed)
		return
	}
	var m group.Member
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8192)).Decode(&m); err != nil {
		http.Error(w, "body: want {\"id\": ..., \"peer\": ..., \"client\": ..., \"client_tls_addr\", \"gossip\", \"admin\", \"incarnation\"}", http.StatusBadRequest)
		return
	}
	m.State = group.MemberJoining
	s.runMemberChange(w, r, m.ID, "add", func(ctx context.Context) (*adminapi.MemberChangeError, error) {
		return s.AddMember(ctx, m, r.Header.Get("Authorization"))
	})
}

// memberDeleteHandler serves DELETE /members/{id}.
func (s *Server) memberDeleteHandler(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	if err != nil || id == 0 {
		http.Error(w, "node id: want a number above 0", http.StatusBadRequest)
		return
	}
	s.runMemberChange(w, r, uint32(id), "remove", func(ctx context.Context) (*adminapi.MemberChangeError, error) {
		return s.RemoveMember(ctx, uint32(id), r.Header.Get("Authorization"))
	})
}

func (s *Server) runMemberChange(w http.ResponseWriter, r *http.Request, id uint32, op string, run func(context.Context) (*adminapi.MemberChangeError, error)) {
	if !s.svc.Group(group.NamespaceGroup).Serving() {
		m, ok := s.awaitSystemMaster(r.Context())
		if !ok {
			http.Error(w, fmt.Sprintf("no live master of the member list (group 0) within %v (last known: node %d); retry", MemberChangeTimeout, m), http.StatusServiceUnavailable)
			return
		}
		if m != paxos.NodeID(s.cfg.NodeID) {
			if !s.redirectTo(w, r, uint32(m)) {
				http.Error(w, fmt.Sprintf("this node does not master the member list (master: node %d); retry there", m), http.StatusServiceUnavailable)
			}
			return
		}
	}
	select {
	case s.memChange <- struct{}{}:
		defer func() { <-s.memChange }()
	case <-r.Context().Done():
		http.Error(w, "another member change is in progress on this node; retry", http.StatusServiceUnavailable)
		return
	}
	s.log.Info("member change started", "op", op, "node", id)
	rep, err := run(r.Context())
	switch {
	case err == nil:
		s.log.Info("member change done", "op", op, "node", id)
		writeJSON(w, http.StatusOK, s.MembersReport())
	case errors.Is(err, errLeaving):
		// Placement hands group 0 to another node; send the request there.
		var m paxos.NodeID
		ok := waitUntil(r.Context(), MemberChangeTimeout, func() bool {
			m = s.svc.SystemMaster()
			return m != 0 && m != paxos.NodeID(s.cfg.NodeID)
		})
		if !ok || !s.redirectTo(w, r, uint32(m)) {
			http.Error(w, "this node, being removed, handed the member list over; retry on another node", http.StatusServiceUnavailable)
		}
	case rep != nil:
		rep.Next = resumeNote
		s.log.Warn("member change incomplete; the master of group 0 resumes it", "op", op, "node", id, "done", rep.Done, "pending", rep.Pending, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, rep)
	case errors.Is(err, group.ErrNotSystemMaster):
		http.Error(w, "this node stopped mastering the member list; retry", http.StatusServiceUnavailable)
	case errors.Is(err, group.ErrMemberRemoved), errors.Is(err, group.ErrIncarnation):
		http.Error(w, err.Error(), http.StatusConflict)
	case errors.Is(err, wire.ErrInvalid), errors.Is(err, paxos.ErrBadChange):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type groupChange struct {
	Add    uint32 `json:"add,omitempty"`
	Remove uint32 `json:"remove,omitempty"`
}

// groupChangeHandler serves POST /members/groups/{g} {"add": id} or
// {"remove": id}: this node, as group g's master, applies the change
// (409 when it does not master the group).
func (s *Server) groupChangeHandler(w http.ResponseWriter, r *http.Request) {
	g, err := strconv.Atoi(r.PathValue("g"))
	if err != nil || g < 0 || g >= len(s.svc.Groups()) {
		http.Error(w, "group: want a group number", http.StatusBadRequest)
		return
	}
	var body groupChange
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		http.Error(w, "body: want {\"add\": id} or {\"remove\": id}", http.StatusBadRequest)
		return
	}
	ch := paxos.MemberChange{Add: paxos.NodeID(body.Add), Remove: paxos.NodeID(body.Remove)}
	ctx, cancel := context.WithTimeout(r.Context(), MemberChangeTimeout)
	defer cancel()
	err = s.changeLocalGroup(ctx, g, ch)
	switch {
	case err == nil:
		s.log.Info("group membership changed", "group", g, "change", ch.String())
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, paxos.ErrBadChange):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, errGroupMaster):
		http.Error(w, fmt.Sprintf("not the master of group %d", g), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}
