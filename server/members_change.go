package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// Adding and removing nodes (admin API: GET /members, POST /members,
// DELETE /members/{id}). The master of group 0 drives a change as one
// procedure whose every step is durable and skipped when already done, so
// that running it again finishes a change an error interrupted:
//
//	add:    record the node as joining; for each group, add it to the
//	        group's acceptors (one change at a time, through the group's
//	        log, on the group's master); record it as a member.
//	remove: record it as leaving; for each group, remove it; record it
//	        as removed (its id is never used again).
//
// A group's change is proposed by that group's master: this node when it
// is, else the master's admin endpoint (POST /members/groups/{g}) with the
// operator's credentials.
//
// One change runs at a time on a node (memChange). A procedure stops when
// its node stops mastering group 0 (its quorum lost, or group 0 moved),
// and the master of group 0 resumes on its own every change the list
// shows half-done (a record joining or leaving): when it becomes master,
// and when the list changes (resumeMemberChanges). An add is resumed only
// while the new node is reachable: finishing the add of a node that is
// down would leave every group with one acceptor fewer to spare.

// MemberChangeTimeout bounds one group's change within a procedure.
const MemberChangeTimeout = 20 * time.Second

// AddMember adds node m.ID (addresses and incarnation from m) to the
// cluster: recorded as joining, added to every group's acceptors, then
// recorded as a member. It must run on the master of group 0. A node the
// list already has as a member is re-checked group by group (a rerun
// finishes what an earlier run left); a removed id, or a known id with
// another incarnation, is refused. auth is the operator's Authorization
// header, passed on to the masters of other groups. When some group could
// not be changed the error comes with a MemberChangeError naming the
// groups done and pending.
func (s *Server) AddMember(ctx context.Context, m group.Member, auth string) (*adminapi.MemberChangeError, error) {
	cur, known := s.svc.Member(m.ID)
	switch {
	case known && !cur.Live():
		return nil, group.ErrMemberRemoved
	case known && cur.Incarnation != 0 && m.Incarnation != 0 && cur.Incarnation != m.Incarnation:
		return nil, group.ErrIncarnation
	case known && cur.State == group.MemberLeaving:
		return nil, fmt.Errorf("%w: node %d is being removed; finish the removal", wire.ErrInvalid, m.ID)
	}
	if known && cur.State == group.MemberActive {
		m.State = group.MemberActive // keep it a member while groups are re-checked
	}
	if m.Peer == "" && known {
		m.Peer, m.Client, m.ClientTLS, m.Gossip, m.Admin = cur.Peer, cur.Client, cur.ClientTLS, cur.Gossip, cur.Admin
	}
	if err := s.svc.PutMember(ctx, m); err != nil {
		return nil, err
	}
	if rep, err := s.changeGroups(ctx, paxos.MemberChange{Add: paxos.NodeID(m.ID)}, auth); err != nil {
		rep.Op = "add"
		return rep, err
	}
	m.State = group.MemberActive
	m.Incarnation = 0 // keep the recorded one
	return nil, s.svc.PutMember(ctx, m)
}

// RemoveMember removes node id from the cluster: recorded as leaving,
// removed from every group's acceptors, then recorded as removed (for
// good). Like AddMember, it is idempotent and finishes an earlier run.
func (s *Server) RemoveMember(ctx context.Context, id uint32, auth string) (*adminapi.MemberChangeError, error) {
	cur, known := s.svc.Member(id)
	if !known {
		return nil, fmt.Errorf("%w: node %d is not in the member list", wire.ErrInvalid, id)
	}
	if cur.Live() {
		cur.State = group.MemberLeaving
		if err := s.svc.PutMember(ctx, cur); err != nil {
			return nil, err
		}
	}
	if id == s.cfg.NodeID {
		// Leaving, this node is no longer placed: group 0 moves to
		// another node, which finishes the removal.
		return nil, errLeaving
	}
	if rep, err := s.changeGroups(ctx, paxos.MemberChange{Remove: paxos.NodeID(id)}, auth); err != nil {
		rep.Op = "remove"
		return rep, err
	}
	cur.State = group.MemberRemoved
	return nil, s.svc.PutMember(ctx, cur)
}

// changeGroups applies ch to every group, one at a time, skipping those
// that have it already. It goes on past a group that fails (so that one
// group without quorum does not hold the others back) and reports which
// ones are done. It stops, the groups left pending, when ctx ends or this
// node stops mastering group 0 (errLostSystemMaster).
func (s *Server) changeGroups(ctx context.Context, ch paxos.MemberChange, auth string) (*adminapi.MemberChangeError, error) {
	ctx, stop := s.whileSystemMaster(ctx)
	defer stop()
	rep := &adminapi.MemberChangeError{Node: uint32(ch.Add | ch.Remove), Done: []int{}, Pending: []int{}}
	var errs []error
	n := len(s.svc.Groups())
	for g := range n {
		gctx, cancel := context.WithTimeout(ctx, MemberChangeTimeout)
		err := s.changeGroup(gctx, group.ID(g), ch, auth)
		cancel()
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errLostSystemMaster) {
				err = cause
			}
			rep.Pending = append(rep.Pending, g)
			errs = append(errs, fmt.Errorf("group %d: %w", g, err))
			if ctx.Err() != nil {
				for g2 := g + 1; g2 < n; g2++ {
					rep.Pending = append(rep.Pending, g2)
				}
				break
			}
			continue
		}
		rep.Done = append(rep.Done, g)
	}
	if len(errs) == 0 {
		return rep, nil
	}
	err := fmt.Errorf("server: member change %s: groups %v not changed: %w", ch, rep.Pending, errors.Join(errs...))
	rep.Error = err.Error()
	return rep, err
}

// errLostSystemMaster ends a member change whose node stopped mastering
// group 0 for a lease: the groups lost their quorum, or group 0 moved.
var errLostSystemMaster = fmt.Errorf("this node stopped mastering the member list (group 0 lost its quorum, or moved): %w", group.ErrNotSystemMaster)

// whileSystemMaster returns a context that ends, with cause
// errLostSystemMaster, once this node has not served group 0 for a lease
// (a lapse shorter than that, such as a lease renewed late on a loaded
// machine, is ridden out).
func (s *Server) whileSystemMaster(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	grace := max(time.Duration(s.cfg.Lease), 100*time.Millisecond)
	go func() {
		t := time.NewTicker(grace / 5)
		defer t.Stop()
		var since time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				switch {
				case s.svc.Group(group.NamespaceGroup).Serving():
					since = time.Time{}
				case since.IsZero():
					since = now
				case now.Sub(since) >= grace:
					cancel(errLostSystemMaster)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// groupHas reports whether ch is in force in group g as this node's
// replica last saw it.
func groupHas(rep *host.Replica, ch paxos.MemberChange) bool {
	cur := rep.Membership().Current
	if cur.IsZero() {
		return false
	}
	if ch.Add != 0 {
		return cur.Contains(ch.Add)
	}
	return !cur.Contains(ch.Remove)
}

// errLeaving says the node being removed is this one, the master of
// group 0: it is marked leaving, and the next master of group 0 finishes
// (the admin endpoint sends the request there).
var errLeaving = adminhttp.ErrLeaving

// errGroupMaster says the node asked to change a group does not master
// it (the admin endpoint answers 409).
var errGroupMaster = adminhttp.ErrNotGroupMaster

// changeGroup applies ch to group g through its master, retrying while a
// change is in progress or the master is moving, until ctx ends.
func (s *Server) changeGroup(ctx context.Context, g group.ID, ch paxos.MemberChange, auth string) error {
	if h := s.cfg.hooks; h != nil {
		if f := h.failGroupChange.Load(); f != nil {
			if err := (*f)(s.cfg.NodeID, int(g)); err != nil {
				return err
			}
		}
	}
	return retry(ctx, 50*time.Millisecond, time.Second, func() error {
		if s.svc.Group(g).Serving() {
			return s.changeLocalGroup(ctx, g, ch)
		}
		return s.changeRemoteGroup(ctx, g, ch, auth)
	}, func(err error) bool { return errors.Is(err, paxos.ErrBadChange) })
}

// changeLocalGroup applies ch to group g, which this node masters, and
// returns once it is in force (or was already).
func (s *Server) changeLocalGroup(ctx context.Context, g group.ID, ch paxos.MemberChange) error {
	rep := s.replica(g)
	if rep == nil {
		return errors.New("group has no paxos replica")
	}
	if groupHas(rep, ch) {
		return nil
	}
	if !s.svc.Group(g).Serving() {
		return errGroupMaster
	}
	_, err := rep.ChangeMembership(ctx, ch)
	if errors.Is(err, paxos.ErrBadChange) && groupHas(rep, ch) {
		return nil // done meanwhile (a rerun, or a retried proposal)
	}
	if errors.Is(err, paxos.ErrNotMaster) {
		return errGroupMaster
	}
	return err
}

// changeRemoteGroup asks group g's master, as this node knows it, to
// apply ch.
func (s *Server) changeRemoteGroup(ctx context.Context, g group.ID, ch paxos.MemberChange, auth string) error {
	m := s.svc.Group(g).Consensus().Status().Master
	if m == 0 {
		return errGroupMaster
	}
	n := s.addr(m)
	if n.Admin == "" {
		return fmt.Errorf("group master node %d has no admin address", m)
	}
	scheme := "http://"
	if s.sec.adminTLS != nil {
		scheme = "https://"
	}
	body, _ := json.Marshal(adminapi.GroupChange{Add: uint32(ch.Add), Remove: uint32(ch.Remove)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme+n.Admin+"/members/groups/"+strconv.Itoa(int(g)), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("group change request: %w", err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.memberClient().Do(req)
	if err != nil {
		return fmt.Errorf("node %d: %w", m, err)
	}
	defer func() { _ = resp.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		return nil
	case http.StatusBadRequest:
		return fmt.Errorf("node %d: %s: %w", m, bytes.TrimSpace(msg), paxos.ErrBadChange)
	}
	return fmt.Errorf("node %d: %s: %s", m, resp.Status, bytes.TrimSpace(msg))
}

// memberClient is the HTTP client for other nodes' admin endpoints during
// a member change: consoleClient's transport, with the change's own
// timeout.
func (s *Server) memberClient() *http.Client {
	c := *s.consoleClient()
	c.Timeout = MemberChangeTimeout
	return &c
}
