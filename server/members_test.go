package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
)

// memberCall sends an admin request with the token and returns the status
// code and body.
func memberCall(t *testing.T, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	hc := &http.Client{Timeout: 5 * time.Minute}
	code, out, err := adminCall(context.Background(), hc, method, url, token, b)
	if err != nil {
		t.Fatal(err)
	}
	return code, out
}

// memberCallSettled is memberCall retried while the answer is 503, as
// paxlockctl does: placement may move group 0, whose master runs member
// changes, while the test's node joins (each 503 changed nothing).
func memberCallSettled(t *testing.T, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var code int
	var out []byte
	testutil.Eventually(t, 2*time.Minute, func() bool {
		code, out = memberCall(t, method, url, token, body)
		return code != http.StatusServiceUnavailable
	}, "%s %s to answer other than 503", method, url)
	return code, out
}

// groupsHave reports whether every group on s has id as an acceptor
// (want true) or not (want false).
func groupsHave(s *Server, id uint32, want bool) bool {
	for _, g := range s.groupMembers() {
		if slices.Contains(g.Members, id) != want {
			return false
		}
	}
	return true
}

// TestMembersAddRemove runs a 3-node cluster with an admin token, adds a
// fourth node the way paxlockd -join does (member list read from one
// node, the add asked of another, which redirects to group 0's master,
// which forwards each group's change to that group's master), checks that
// every node's list and every group have it, that it catches up and takes
// the groups placement gives it; runs the add again (a no-op); removes
// node 1; and checks that a node under a removed id, or under a known id
// with a new data directory, is refused.
func TestMembersAddRemove(t *testing.T) {
	t.Parallel()
	const token = "member-test-token"
	// The token comes from a file, not PAXLOCK_ADMIN_TOKEN: the test runs
	// in parallel with others, which t.Setenv forbids.
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tc := startClusterWith(t, 3, func(c *Config) { c.AdminTokenFile = tokenFile })
	for _, s := range tc.nodes {
		waitFor(t, "member list installed", func() bool { l, ok := s.svc.Members(); return ok && len(l) == 3 })
	}
	ports := freePorts(t, 4)
	n4 := NodeAddr{ID: 4, Peer: ports[0], Client: ports[1], Gossip: ports[2], Admin: ports[3]}
	cfg4 := tc.cfgs[0]
	cfg4.NodeID, cfg4.Nodes, cfg4.AdminAddr, cfg4.DataDir = 4, []NodeAddr{n4}, n4.Admin, t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := PrepareJoin(ctx, &cfg4, tc.cfgs[2].Nodes[2].Admin); err != nil {
		t.Fatal(err)
	}
	if len(cfg4.Nodes) != 4 || !cfg4.Join {
		t.Fatalf("prepared config: %+v", cfg4.Nodes)
	}
	tc.cfgs = append(tc.cfgs, cfg4)
	tc.nodes = append(tc.nodes, nil)
	tc.start(3)
	s4 := tc.nodes[3]
	if err := s4.JoinCluster(ctx, tc.cfgs[1].Nodes[1].Admin); err != nil {
		t.Fatal(err)
	}
	for _, s := range tc.nodes {
		waitFor(t, "node 4 a member everywhere", func() bool {
			m, ok := s.svc.Member(4)
			return ok && m.State == group.MemberActive && m.Incarnation == s4.incarnation && groupsHave(s, 4, true)
		})
	}
	// Placement over 4 nodes gives node 4 groups 3, 7 and 11.
	waitFor(t, "node 4 masters group 3", func() bool { return s4.svc.Group(3).Serving() })
	for _, s := range tc.nodes {
		if v := s.View(); len(v.Nodes) != 4 {
			t.Errorf("node %d's view lists %d nodes", s.cfg.NodeID, len(v.Nodes))
		}
	}
	// Again: nothing to do, done.
	self4 := memberOf(n4, group.MemberJoining)
	self4.Incarnation = s4.incarnation
	if code, body := memberCallSettled(t, http.MethodPost, "http://"+tc.cfgs[0].Nodes[0].Admin+"/members", token, self4); code != http.StatusOK {
		t.Fatalf("add again: %d %s", code, body)
	}
	if code, _ := memberCall(t, http.MethodPost, "http://"+tc.cfgs[0].Nodes[0].Admin+"/members", "", self4); code != http.StatusUnauthorized {
		t.Fatalf("add without the token: %d", code)
	}

	if code, body := memberCallSettled(t, http.MethodDelete, "http://"+n4.Admin+"/members/1", token, nil); code != http.StatusOK {
		t.Fatalf("remove node 1: %d %s", code, body)
	}
	for _, s := range tc.nodes[1:] {
		waitFor(t, "node 1 removed everywhere", func() bool {
			m, ok := s.svc.Member(1)
			return ok && m.State == group.MemberRemoved && groupsHave(s, 1, false)
		})
		waitFor(t, "views without node 1", func() bool { return len(s.View().Nodes) == 3 })
	}
	tc.stop(0)
	for _, s := range tc.nodes[1:] {
		waitFor(t, "every group served without node 1", func() bool {
			for _, g := range s.View().Groups {
				if g.Master == 0 || g.Master == 1 {
					return false
				}
			}
			return true
		})
	}
	for _, id := range []uint32{1, 4} {
		cfg := cfg4
		cfg.NodeID, cfg.Join, cfg.DataDir = id, false, t.TempDir()
		n := n4
		n.ID = id
		cfg.Nodes = []NodeAddr{n}
		err := PrepareJoin(ctx, &cfg, tc.cfgs[1].Nodes[1].Admin)
		if !errors.Is(err, ErrJoinRefused) {
			t.Errorf("node %d with a new data directory: %v, want ErrJoinRefused", id, err)
		}
	}
	other := cfg4
	other.NodeID, other.Join, other.DataDir, other.ClusterName = 9, false, t.TempDir(), "another"
	n9 := n4
	n9.ID = 9
	other.Nodes = []NodeAddr{n9}
	if err := PrepareJoin(ctx, &other, tc.cfgs[1].Nodes[1].Admin); !errors.Is(err, ErrJoinRefused) {
		t.Errorf("a node of another cluster: %v, want ErrJoinRefused", err)
	}
	// A seed node's incarnation is recorded at its first contact with the
	// list's master; wiped and restarted under its id (no -join), it is
	// refused by its peers and told so.
	s3 := tc.nodes[2]
	waitFor(t, "node 3's incarnation recorded", func() bool {
		m, _ := tc.nodes[1].svc.Member(3)
		return m.Incarnation == s3.incarnation
	})
	tc.stop(2)
	tc.cfgs[2].DataDir = t.TempDir()
	tc.start(2)
	select {
	case err := <-tc.nodes[2].Failed():
		if !strings.Contains(err.Error(), "new id") {
			t.Errorf("wiped node 3: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("a wiped node under its old id was not refused by its peers")
	}
	tc.stop(2)
	// The cluster itself refuses a removed id and another incarnation.
	s2 := tc.nodes[1]
	bad := []group.Member{{ID: 1, Peer: "x:1"}, {ID: 4, Peer: n4.Peer, Incarnation: s4.incarnation + 2}}
	for _, m := range bad {
		code, body := memberCall(t, http.MethodPost, "http://"+s2.cfg.self().Admin+"/members", token, m)
		if code != http.StatusConflict {
			t.Errorf("add %+v: %d %s, want 409", m, code, bytes.TrimSpace(body))
		}
	}
}

// TestMemberChangeResumes: an add that some groups cannot take answers
// which groups are done and which are pending, leaves the node joining
// (not placed), and running it again finishes it without redoing the
// groups done.
func TestMemberChangeResumes(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	for _, s := range tc.nodes {
		waitFor(t, "member list installed", func() bool { l, ok := s.svc.Members(); return ok && len(l) == 3 })
	}
	master := func() *Server {
		for _, s := range tc.nodes {
			if s.svc.Group(group.NamespaceGroup).Serving() {
				return s
			}
		}
		return nil
	}
	// Placement settled first: a move of group 0 during the add would end
	// the add on the node that stopped mastering the member list.
	tc.waitBalanced()
	var m *Server
	waitFor(t, "a master of group 0", func() bool { m = master(); return m != nil })
	// Node 4 never runs: three of four acceptors still make a quorum.
	n4 := group.Member{ID: 4, State: group.MemberJoining, Peer: "127.0.0.1:1", Client: "127.0.0.1:2", Incarnation: 44}
	broken := errors.New("injected: group unavailable")
	hook := func(_ uint32, g int) error {
		if g >= 5 && g < 10 {
			return broken
		}
		return nil
	}
	tc.hooks.failGroupChange.Store(&hook)
	defer tc.hooks.failGroupChange.Store(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := m.AddMember(ctx, n4, "")
	for errors.Is(err, group.ErrNotSystemMaster) && ctx.Err() == nil {
		// This node lost group 0 for a lease (a loaded machine): the
		// change is the next master's to run, from where it stopped.
		waitFor(t, "a master of group 0", func() bool { m = master(); return m != nil })
		rep, err = m.AddMember(ctx, n4, "")
	}
	if !errors.Is(err, broken) || rep == nil {
		t.Fatalf("add with five groups failing: %v, report %+v", err, rep)
	}
	if !slices.Equal(rep.Pending, []int{5, 6, 7, 8, 9}) || !slices.Equal(rep.Done, []int{0, 1, 2, 3, 4, 10, 11, 12, 13, 14}) || rep.Op != "add" {
		t.Fatalf("report %+v", rep)
	}
	if got, _ := m.svc.Member(4); got.State != group.MemberJoining {
		t.Fatalf("node 4 after a partial add: %+v", got)
	}
	if ids := m.placementIDs(); slices.Contains(ids, 4) {
		t.Fatalf("a joining node is placed: %v", ids)
	}
	tc.hooks.failGroupChange.Store(nil)
	waitFor(t, "the master of group 0 still serving", func() bool { m = master(); return m != nil })
	rep, err = m.AddMember(ctx, n4, "")
	for errors.Is(err, group.ErrNotSystemMaster) && ctx.Err() == nil {
		waitFor(t, "a master of group 0", func() bool { m = master(); return m != nil })
		rep, err = m.AddMember(ctx, n4, "")
	}
	if err != nil {
		t.Fatalf("rerun: %v %+v", err, rep)
	}
	for _, s := range tc.nodes {
		waitFor(t, "node 4 a member in every group", func() bool {
			got, _ := s.svc.Member(4)
			return got.State == group.MemberActive && got.Incarnation == 44 && groupsHave(s, 4, true)
		})
	}
}
