package adminhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// ErrLeaving says the node a removal names is this one, the master of
// group 0: it is marked leaving, and the next master of group 0 finishes
// the change, where the request is redirected.
var ErrLeaving = errors.New("removing the master of the member list")

// ErrNotGroupMaster says the node asked to change a group does not
// master it (HTTP 409).
var ErrNotGroupMaster = errors.New("not the group's master")

// resumeNote is adminapi.MemberChangeError.Next.
const resumeNote = "the master of group 0 finishes the change on its own once the pending groups have a quorum (an add waits until the new node is reachable); GET /members shows the progress; running the change again also finishes it"

// MemberNode is what the membership endpoints ask of the node.
type MemberNode interface {
	// NodeID is this node's ID; Groups the cluster's lock group count.
	NodeID() uint32
	Groups() int
	// MembersReport is the member list and every group's acceptors.
	MembersReport() adminapi.MembersReport
	// ServesSystem reports whether this node masters lock group 0 and
	// serves it. AwaitSystemMaster waits, within ctx and the member
	// change timeout, until this node serves group 0 or knows a
	// reachable master of it, and returns that master and whether one
	// was found (else the last one named). AwaitHandOver waits likewise
	// for a master of group 0 other than this node (after ErrLeaving).
	ServesSystem() bool
	AwaitSystemMaster(ctx context.Context) (uint32, bool)
	AwaitHandOver(ctx context.Context) (uint32, bool)
	// BeginMemberChange admits one member change at a time on this node:
	// ok false when ctx ended first, else end ends the change.
	BeginMemberChange(ctx context.Context) (end func(), ok bool)
	// AddMember and RemoveMember run a change of the member list across
	// the groups (auth: the request's Authorization, for the other
	// nodes); a change that could not complete says how far it went.
	AddMember(ctx context.Context, m adminapi.Member, auth string) (*adminapi.MemberChangeError, error)
	RemoveMember(ctx context.Context, id uint32, auth string) (*adminapi.MemberChangeError, error)
	// ChangeGroup applies ch to lock group g, which this node must
	// master (ErrNotGroupMaster).
	ChangeGroup(ctx context.Context, g int, ch paxos.MemberChange) error
}

// members serves GET and POST /members.
func (h *handler) members(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, h.Node.MembersReport())
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "use GET, or POST {\"id\": ..., \"peer\": ..., \"client\": ...}", http.StatusMethodNotAllowed)
		return
	}
	var m adminapi.Member
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8192)).Decode(&m); err != nil {
		http.Error(w, "body: want {\"id\": ..., \"peer\": ..., \"client\": ..., \"client_tls_addr\", \"gossip\", \"admin\", \"incarnation\"}", http.StatusBadRequest)
		return
	}
	m.State = adminapi.MemberJoining
	h.runMemberChange(w, r, m.ID, "add", func(ctx context.Context) (*adminapi.MemberChangeError, error) {
		return h.Node.AddMember(ctx, m, r.Header.Get("Authorization"))
	})
}

// memberDelete serves DELETE /members/{id}.
func (h *handler) memberDelete(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	if err != nil || id == 0 {
		http.Error(w, "node id: want a number above 0", http.StatusBadRequest)
		return
	}
	h.runMemberChange(w, r, uint32(id), "remove", func(ctx context.Context) (*adminapi.MemberChangeError, error) {
		return h.Node.RemoveMember(ctx, uint32(id), r.Header.Get("Authorization"))
	})
}

// runMemberChange runs a change on group 0's master: a node that is not
// redirects there (or answers 503 when none is known), and changes on
// one node run one at a time.
func (h *handler) runMemberChange(w http.ResponseWriter, r *http.Request, id uint32, op string, run func(context.Context) (*adminapi.MemberChangeError, error)) {
	if !h.Node.ServesSystem() {
		m, ok := h.Node.AwaitSystemMaster(r.Context())
		if !ok {
			http.Error(w, fmt.Sprintf("no live master of the member list (group 0) within %v (last known: node %d); retry", h.MemberChangeTimeout, m), http.StatusServiceUnavailable)
			return
		}
		if m != h.Node.NodeID() {
			if !h.redirectTo(w, r, m) {
				http.Error(w, fmt.Sprintf("this node does not master the member list (master: node %d); retry there", m), http.StatusServiceUnavailable)
			}
			return
		}
	}
	end, ok := h.Node.BeginMemberChange(r.Context())
	if !ok {
		http.Error(w, "another member change is in progress on this node; retry", http.StatusServiceUnavailable)
		return
	}
	defer end()
	h.Log.Info("member change started", "op", op, "node", id)
	rep, err := run(r.Context())
	switch {
	case err == nil:
		h.Log.Info("member change done", "op", op, "node", id)
		writeJSON(w, http.StatusOK, h.Node.MembersReport())
	case errors.Is(err, ErrLeaving):
		// Placement hands group 0 to another node; send the request there.
		m, ok := h.Node.AwaitHandOver(r.Context())
		if !ok || !h.redirectTo(w, r, m) {
			http.Error(w, "this node, being removed, handed the member list over; retry on another node", http.StatusServiceUnavailable)
		}
	case rep != nil:
		rep.Next = resumeNote
		h.Log.Warn("member change incomplete; the master of group 0 resumes it", "op", op, "node", id, "done", rep.Done, "pending", rep.Pending, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, rep)
	case errors.Is(err, ErrNotSystemMaster):
		http.Error(w, "this node stopped mastering the member list; retry", http.StatusServiceUnavailable)
	case errors.Is(err, ErrConflict):
		http.Error(w, err.Error(), http.StatusConflict)
	case errors.Is(err, wire.ErrInvalid), errors.Is(err, ErrBadInput):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// groupChange serves POST /members/groups/{g} (adminapi.GroupChange):
// this node, as group g's master, applies the change (409 when it does
// not master the group).
func (h *handler) groupChange(w http.ResponseWriter, r *http.Request) {
	g, err := strconv.Atoi(r.PathValue("g"))
	if err != nil || g < 0 || g >= h.Node.Groups() {
		http.Error(w, "group: want a group number", http.StatusBadRequest)
		return
	}
	var body adminapi.GroupChange
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		http.Error(w, "body: want {\"add\": id} or {\"remove\": id}", http.StatusBadRequest)
		return
	}
	ch := paxos.MemberChange{Add: paxos.NodeID(body.Add), Remove: paxos.NodeID(body.Remove)}
	ctx, cancel := context.WithTimeout(r.Context(), h.MemberChangeTimeout)
	defer cancel()
	err = h.Node.ChangeGroup(ctx, g, ch)
	switch {
	case err == nil:
		h.Log.Info("group membership changed", "group", g, "change", ch.String())
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrBadInput):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrNotGroupMaster):
		http.Error(w, fmt.Sprintf("not the master of group %d", g), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}

// writeJSON answers v, indented, with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
