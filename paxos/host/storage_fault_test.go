package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// voteSpy records the votes and promises a node's transport sent, and
// drops the Accepts of group dropAccepts (when not 0).
type voteSpy struct {
	next        paxos.Transport
	dropAccepts atomic.Uint32
	mu          sync.Mutex
	// accepted: per (group, instance), the highest ballot voted for;
	// promised: per group, the highest ballot promised.
	accepted map[[2]uint64]paxos.Ballot
	promised map[paxos.GroupID]paxos.Ballot
}

func (s *voteSpy) Send(msgs []paxos.Message) {
	if g := paxos.GroupID(s.dropAccepts.Load()); g != 0 {
		kept := make([]paxos.Message, 0, len(msgs))
		for _, m := range msgs {
			if m.Type != paxos.MsgAccept || m.Group != g {
				kept = append(kept, m)
			}
		}
		msgs = kept
	}
	s.mu.Lock()
	for _, m := range msgs {
		if m.Reject {
			continue
		}
		switch m.Type {
		case paxos.MsgAccepted:
			k := [2]uint64{uint64(m.Group), m.Instance}
			if b, ok := s.accepted[k]; !ok || b.Less(m.Ballot) {
				s.accepted[k] = m.Ballot
			}
		case paxos.MsgPromise:
			if s.promised[m.Group].Less(m.Ballot) {
				s.promised[m.Group] = m.Ballot
			}
		}
	}
	s.mu.Unlock()
	s.next.Send(msgs)
}

func (s *voteSpy) Close() error { return s.next.Close() }

// storedEntry returns group g's stored entry for instance inst, if any.
func storedEntry(s paxos.Storage, g paxos.GroupID, inst uint64) (paxos.Entry, bool, error) {
	es, err := s.Entries(g, inst, inst, 0)
	if err != nil || len(es) == 0 {
		return paxos.Entry{}, false, err
	}
	return es[0], true, nil
}

// isStorageStop checks err is what a proposal gets from a replica that a
// storage failure stopped.
func isStorageStop(err error) bool {
	return errors.Is(err, paxos.ErrStorageFailed) && errors.Is(err, paxos.ErrStopped) && errors.Is(err, errorfs.ErrInjected)
}

// TestClusterStorageFailureFailStops: when one replica's WAL writes start
// failing, that replica stops every group (its proposals fail with the
// storage error, it reports no master and not serving, it logs the
// failure once), nothing acknowledged is lost, the other two replicas go
// on committing in every group (masters move away from the failed one),
// the failed replica never voted for a write it had not made durable, and
// after a restart on a healthy disk it catches up and serves again.
func TestClusterStorageFailureFailStops(t *testing.T) {
	const groups = 6
	faults := paxostest.WALFaults()
	logs := testutil.NewErrorCounter()
	spy := &voteSpy{accepted: map[[2]uint64]paxos.Ballot{}, promised: map[paxos.GroupID]paxos.Ballot{}}
	tc := newTestCluster(t, 3, groups, 0, func(tc *testCluster) {
		tc.nodes[1].fs = errorfs.Wrap(vfs.Default, faults)
		tc.nodes[1].log = slog.New(logs)
		tc.wrapTr = func(id paxos.NodeID, tr paxos.Transport) paxos.Transport {
			if id != 1 {
				return tr
			}
			spy.next = tr
			return spy
		}
	})
	n1 := tc.nodes[1]
	// Placement puts groups 3 and 6 on node 1.
	testutil.Eventually(t, 60*time.Second, func() bool {
		return n1.host.Replica(3).Status().Serving && n1.host.Replica(6).Status().Serving
	}, "node 1 to master groups 3 and 6")
	acked := map[paxos.GroupID]map[string]string{}
	ack := func(g paxos.GroupID, k, v string) {
		if acked[g] == nil {
			acked[g] = map[string]string{}
		}
		acked[g][k] = v
	}
	for i := range 5 {
		for g := paxos.GroupID(1); g <= groups; g++ {
			k, v := fmt.Sprintf("k%d", i), fmt.Sprint(g*100+paxos.GroupID(i))
			tc.put(g, k, v)
			ack(g, k, v)
		}
	}

	faults.On()
	// Every group writes to node 1 (master or follower), and each write
	// fails it. The first group's master is node 2: node 1 fails as a
	// follower, with a vote to send that its disk does not back.
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.put(g, "fault", "x")
		ack(g, "fault", "x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testutil.Eventually(t, 60*time.Second, func() bool { return n1.host.Err() != nil }, "node 1 to stop its groups")
	if err := n1.host.Err(); !isStorageStop(err) {
		t.Fatalf("host error %v, want the storage error", err)
	}
	if err := n1.store.Err(); !errors.Is(err, paxos.ErrStorageFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("store error %v", err)
	}
	for g := paxos.GroupID(1); g <= groups; g++ {
		gr := n1.host.Replica(g)
		if st := gr.Status(); st.Serving || st.Master != 0 {
			t.Errorf("group %d on the failed node reports %+v", g, st)
		}
		if _, err := gr.Propose(ctx, []byte("late=1")); !isStorageStop(err) {
			t.Errorf("group %d: proposal after the failure: %v, want the storage error", g, err)
		}
	}
	// The other two replicas commit in every group, with masters of their
	// own (node 1's groups moved).
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.put(g, "after", "y")
		ack(g, "after", "y")
		if m := tc.master(g, 60*time.Second); m.host == n1.host {
			t.Errorf("group %d is still mastered by the failed node", g)
		}
	}
	for g, kv := range acked {
		for k, v := range kv {
			for _, id := range []paxos.NodeID{2, 3} {
				tc.waitValue(id, g, k, v)
			}
		}
	}
	if n := logs.Count("storage failed"); n != 1 {
		t.Errorf("node 1 logged the storage failure %d times, want once", n)
	}

	// Every vote and promise node 1 sent is in its data directory: the
	// entry in that ballot (or a later one), or, for an instance node 1
	// already knew chosen (it votes for those without writing them again),
	// the value the voting ballot's master holds.
	tc.stop(1)
	st, err := pebblestore.Open(n1.dir, pebblestore.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	spy.mu.Lock()
	for k, b := range spy.accepted {
		e, ok, err := storedEntry(st, paxos.GroupID(k[0]), k[1])
		if err != nil {
			t.Fatal(err)
		}
		if ok && e.Ballot.Less(b) && b.Node != 1 {
			me, mok, err := storedEntry(tc.nodes[b.Node].store, paxos.GroupID(k[0]), k[1])
			if err != nil {
				t.Fatal(err)
			}
			ok = mok && !me.Ballot.Less(b) && me.Value.Same(e.Value)
		} else if ok {
			ok = !e.Ballot.Less(b)
		}
		if !ok {
			t.Errorf("group %d instance %d: node 1 voted in ballot %v, its disk has %v %v", k[0], k[1], b, e.Ballot, e.Value)
		}
	}
	for g, b := range spy.promised {
		gs, err := st.LoadGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		if gs.Hard.Promised.Less(b) {
			t.Errorf("group %d: node 1 promised %v, its disk has %v", g, b, gs.Hard.Promised)
		}
	}
	votes := len(spy.accepted)
	spy.mu.Unlock()
	if votes == 0 {
		t.Fatal("node 1 sent no votes: the check above checked nothing")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Back on a healthy disk, node 1 catches up and serves again.
	faults.Off()
	tc.start(1)
	for g := paxos.GroupID(1); g <= groups; g++ {
		tc.waitValue(1, g, "after", "y")
	}
	testutil.Eventually(t, 60*time.Second, func() bool {
		return tc.nodes[1].host.Replica(3).Status().Serving || tc.nodes[1].host.Replica(6).Status().Serving
	}, "node 1 to master a group again")
}

// TestClusterStorageFailureFailsPending: a proposal pending on a master
// whose WAL write fails (its followers never see the Accept, so nothing
// can choose it) fails with the storage error.
func TestClusterStorageFailureFailsPending(t *testing.T) {
	faults := paxostest.WALFaults()
	spy := &voteSpy{accepted: map[[2]uint64]paxos.Ballot{}, promised: map[paxos.GroupID]paxos.Ballot{}}
	tc := newTestCluster(t, 3, 3, 0, func(tc *testCluster) {
		tc.nodes[1].fs = errorfs.Wrap(vfs.Default, faults)
		tc.wrapTr = func(id paxos.NodeID, tr paxos.Transport) paxos.Transport {
			if id != 1 {
				return tr
			}
			spy.next = tr
			return spy
		}
	})
	n1 := tc.nodes[1]
	tc.put(3, "before", "1")
	spy.dropAccepts.Store(3)
	faults.On()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	// Placement puts group 3 on node 1; a loaded machine may cost it its
	// lease for a moment.
	testutil.Eventually(t, 60*time.Second, func() bool {
		_, err = n1.host.Replica(3).Propose(ctx, []byte("during=1"))
		return !errors.Is(err, paxos.ErrNotMaster) || n1.host.Err() != nil
	}, "node 1 to master group 3 for the pending proposal")
	if !isStorageStop(err) {
		t.Fatalf("pending proposal: %v, want the storage error", err)
	}
	// The other two take the group over; the failed command is not chosen.
	tc.put(3, "after", "2")
	for _, id := range []paxos.NodeID{2, 3} {
		tc.waitValue(id, 3, "after", "2")
		if _, ok := tc.nodes[id].sms[3].get("during"); ok {
			t.Errorf("node %d applied a command that failed", id)
		}
	}
}
