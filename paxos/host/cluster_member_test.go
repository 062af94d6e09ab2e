package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// change runs ch through group g's master, retrying while masters change,
// and returns the instance that chose it.
func (tc *testCluster) change(g paxos.GroupID, ch paxos.MemberChange) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var inst uint64
	testutil.EventuallyWith(tc.t, 60*time.Second, func() (bool, string) {
		m := tc.master(g, 60*time.Second)
		var err error
		inst, err = m.ChangeMembership(ctx, ch)
		if err == nil {
			return true, ""
		}
		if errors.Is(err, paxos.ErrBadChange) {
			// Chosen already by an attempt that looked lost.
			if st := m.Membership(); ch.Add != 0 && st.Current.Contains(ch.Add) || ch.Remove != 0 && !st.Current.Contains(ch.Remove) {
				inst = 0
				return true, ""
			}
			tc.t.Fatalf("group %d change %s: %v", g, ch, err)
		}
		return false, err.Error()
	}, "group %d change %s", g, ch)
	return inst
}

// members waits until node id's replica of group g has the member set
// want in force.
func (tc *testCluster) members(id paxos.NodeID, g paxos.GroupID, want ...paxos.NodeID) {
	testutil.Eventually(tc.t, 60*time.Second, func() bool {
		nd := tc.nodes[id]
		if nd.host == nil {
			return false
		}
		return slices.Equal(nd.host.Replica(g).Membership().Current.Members, want)
	}, "node %d group %d members %v", id, g, want)
}

// TestClusterMembershipAddRemove grows a running three-node cluster to
// four through each group's log, checks that the new node catches up by
// snapshot and that a restart keeps the set, then removes node 1 and keeps
// serving with node 1 stopped: with a state machine that writes through
// (the set is recorded with every applied instance) and with one that
// checkpoints (recorded at checkpoints, the changes above replayed).
func TestClusterMembershipAddRemove(t *testing.T) {
	t.Run("write-through", func(t *testing.T) { testClusterMembership(t, 0) })
	t.Run("checkpoints", func(t *testing.T) { testClusterMembership(t, 3) })
}

func testClusterMembership(t *testing.T, ckptEvery uint64) {
	const groups = 2
	tc := newTestCluster(t, 3, groups, 0, func(tc *testCluster) { tc.ckptEvery = ckptEvery })
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.put(g, "before", fmt.Sprint(g))
	}

	// Node 4 starts empty, told it joins the set {1,2,3,4}.
	tc.nodes[4] = &testNode{id: 4, dir: t.TempDir(), addr: loopback(t), peers: []paxos.NodeID{1, 2, 3, 4}, join: true}
	tc.start(4)
	for g := paxos.GroupID(1); g <= groups; g++ {
		m := tc.master(g, 60*time.Second)
		if _, err := m.ChangeMembership(context.Background(), paxos.MemberChange{Add: 2}); !errors.Is(err, paxos.ErrBadChange) {
			t.Fatalf("adding a member again: %v", err)
		}
		tc.change(g, paxos.MemberChange{Add: 4})
	}
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.put(g, "after", fmt.Sprint(g))
		for _, id := range []paxos.NodeID{1, 2, 3, 4} {
			tc.waitValue(id, g, "before", fmt.Sprint(g))
			tc.waitValue(id, g, "after", fmt.Sprint(g))
			tc.members(id, g, 1, 2, 3, 4)
		}
	}

	// A restart loads the set it recorded with its applied state.
	tc.stop(2)
	tc.start(2)
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.members(2, g, 1, 2, 3, 4)
		if ckptEvery > 0 {
			continue // recorded at the next checkpoint; replayed until then
		}
		m, err := loadMembership(tc.nodes[2].store.SMReader(g))
		if err != nil || !slices.Equal(m.Members, []paxos.NodeID{1, 2, 3, 4}) {
			t.Fatalf("node 2 group %d recorded %v, %v", g, m, err)
		}
	}

	// Remove node 1, then stop it: three of {2,3,4} go on.
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.change(g, paxos.MemberChange{Remove: 1})
		for _, id := range []paxos.NodeID{2, 3, 4} {
			tc.members(id, g, 2, 3, 4)
		}
	}
	tc.stop(1)
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.put(g, "without1", fmt.Sprint(g))
		for _, id := range []paxos.NodeID{2, 3, 4} {
			tc.waitValue(id, g, "without1", fmt.Sprint(g))
		}
		m := tc.master(g, 60*time.Second)
		if _, err := m.ChangeMembership(context.Background(), paxos.MemberChange{Add: 1}); !errors.Is(err, paxos.ErrBadChange) {
			t.Fatalf("adding removed node 1 again: %v", err)
		}
	}
}

// TestClusterLoadsDataWithoutMemberSet restarts a node whose store has no
// member set recorded, as data written before member sets existed: it
// loads with Config.Peers, serves, and records the set again.
func TestClusterLoadsDataWithoutMemberSet(t *testing.T) {
	tc := newTestCluster(t, 3, 1, 0)
	tc.put(1, "a", "1")
	tc.waitValue(2, 1, "a", "1")
	tc.stop(2)
	st, err := pebblestore.Open(tc.nodes[2].dir, pebblestore.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := loadMembership(st.SMReader(1)); err != nil || !slices.Equal(m.Members, []paxos.NodeID{1, 2, 3}) {
		t.Fatalf("recorded set before the restart: %v, %v", m, err)
	}
	b := st.NewBatch()
	b.SM(1).Delete(membersKey)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	tc.start(2)
	tc.members(2, 1, 1, 2, 3)
	tc.put(1, "b", "2")
	tc.waitValue(2, 1, "b", "2")
	testutil.Eventually(t, 60*time.Second, func() bool {
		m, err := loadMembership(tc.nodes[2].store.SMReader(1))
		return err == nil && slices.Equal(m.Members, []paxos.NodeID{1, 2, 3})
	}, "node 2 records its set again")
}

// TestClusterJoinIdleGroup: a node joins a group that has applied nothing
// yet. The snapshot it installs carries the group's set (recorded when the
// group opened), so until the change that adds it is chosen it does not
// take itself for a member (with the set it joined with, it would, and
// could win an election in a group whose log never added it).
func TestClusterJoinIdleGroup(t *testing.T) {
	tc := newTestCluster(t, 3, 1, 0)
	for _, id := range []paxos.NodeID{1, 2, 3} {
		m, err := loadMembership(tc.nodes[id].store.SMReader(1))
		if err != nil || !slices.Equal(m.Members, []paxos.NodeID{1, 2, 3}) {
			t.Fatalf("node %d recorded %v, %v before applying anything", id, m, err)
		}
	}
	tc.master(1, 60*time.Second)
	tc.nodes[4] = &testNode{id: 4, dir: t.TempDir(), addr: loopback(t), peers: []paxos.NodeID{1, 2, 3, 4}, join: true}
	tc.start(4)
	testutil.Eventually(t, 60*time.Second, func() bool {
		return tc.nodes[4].host.Replica(1).snapInstalled.Load() > 0
	}, "node 4 installs a snapshot")
	tc.members(4, 1, 1, 2, 3)
	tc.change(1, paxos.MemberChange{Add: 4})
	for _, id := range []paxos.NodeID{1, 2, 3, 4} {
		tc.members(id, 1, 1, 2, 3, 4)
	}
}
