package group

import (
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// countingObserver records what an Observer is told.
type countingObserver struct {
	mu        sync.Mutex
	counts    [NumStats]int
	responded map[Op]int
	waited    int
	held      []time.Duration
}

func (o *countingObserver) Released(d time.Duration) {
	o.mu.Lock()
	o.held = append(o.held, d)
	o.mu.Unlock()
}

func (o *countingObserver) Responded(op Op, st wire.Status, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.responded == nil {
		o.responded = map[Op]int{}
	}
	o.responded[op]++
}

func (o *countingObserver) Waited(d time.Duration) {
	o.mu.Lock()
	o.waited++
	o.mu.Unlock()
}

func (o *countingObserver) Count(ev Stat) {
	o.mu.Lock()
	o.counts[ev]++
	o.mu.Unlock()
}

// TestMasterEventsCounted walks node 1 through an election, a lease
// lapse, a mastership transfer to its preferred node and back, and losing the group
// to a rival, and checks the mastership events the Observer counts.
func TestMasterEventsCounted(t *testing.T) {
	t.Parallel()
	obs := &countingObserver{}
	g := &Group{svc: &Service{obs: obs}, id: 3, self: 1}
	b := func(r uint64, n paxos.NodeID) paxos.Ballot { return paxos.Ballot{Round: r, Node: n} }
	steps := []struct {
		to   paxos.SoftState
		pref paxos.NodeID
		want [NumStats]int // running totals after the step
	}{
		{paxos.SoftState{Master: 1, Ballot: b(1, 1)}, 1, [NumStats]int{StatElectionWon: 1, StatMasterChange: 1}},
		{paxos.SoftState{Master: 1, Ballot: b(1, 1), Serving: true}, 1, [NumStats]int{StatElectionWon: 1, StatMasterChange: 1}},
		// The lease lapses, and comes back.
		{paxos.SoftState{Master: 1, Ballot: b(1, 1)}, 1, [NumStats]int{StatElectionWon: 1, StatMasterChange: 1, StatLeaseLoss: 1}},
		{paxos.SoftState{Master: 1, Ballot: b(1, 1), Serving: true}, 2, [NumStats]int{StatElectionWon: 1, StatMasterChange: 1, StatLeaseLoss: 1}},
		// Transfer to node 2, the preferred master: not a lease loss.
		{paxos.SoftState{Ballot: b(2, 1)}, 2, [NumStats]int{StatElectionWon: 1, StatMasterChange: 2, StatLeaseLoss: 1}},
		{paxos.SoftState{Master: 2, Ballot: b(2, 2)}, 2, [NumStats]int{StatElectionWon: 1, StatMasterChange: 3, StatLeaseLoss: 1}},
		// Node 1 preferred again: it takes the group back, a transfer.
		{paxos.SoftState{Master: 1, Ballot: b(3, 1)}, 1, [NumStats]int{StatElectionWon: 1, StatMasterTransfer: 1, StatMasterChange: 4, StatLeaseLoss: 1}},
		{paxos.SoftState{Master: 1, Ballot: b(3, 1), Serving: true}, 1, [NumStats]int{StatElectionWon: 1, StatMasterTransfer: 1, StatMasterChange: 4, StatLeaseLoss: 1}},
		// Superseded by node 3, which is not preferred: a loss.
		{paxos.SoftState{Master: 3, Ballot: b(4, 3)}, 1, [NumStats]int{StatElectionWon: 1, StatMasterTransfer: 1, StatMasterChange: 5, StatLeaseLoss: 2}},
	}
	for i, st := range steps {
		g.preferred.Store(uint32(st.pref))
		prev := g.soft
		g.soft = st.to
		g.countMaster(prev, st.to)
		obs.mu.Lock()
		got := obs.counts
		obs.mu.Unlock()
		if got != st.want {
			t.Errorf("step %d (%+v): counts %v, want %v", i, st.to, got, st.want)
		}
	}
}

// TestHoldAgeAcrossRenewals: a hold's grant time, read back from its
// deadline and age, stays where it was through renewals that move the
// deadline later or earlier.
func TestHoldAgeAcrossRenewals(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	o := wire.Owner{Client: 1, ID: 1}
	key := fullKey("ns", "k")
	out := r.apply(7, command{op: opAcquire, key: key, owner: o, ttlMs: 10000})
	if out.status != wire.StatusSuccess {
		t.Fatalf("acquire: %v", out.status)
	}
	const ms = int64(time.Millisecond)
	granted := 5000 * ms
	if _, ok := r.w.setDeadline(key, o, out.token, granted+10000*ms, nil); !ok {
		t.Fatal("no hold")
	}
	for _, at := range []int64{granted + 17000*ms, granted + 90000*ms, granted + 60000*ms, granted + 3*3600000*ms} {
		r.w.setDeadline(key, o, out.token, at, nil)
		got, ok := r.w.grantedAt(key, o, out.token)
		if !ok {
			t.Fatal("grant time unknown")
		}
		if diff := time.Duration(got - granted).Abs(); diff > time.Duration(at-granted)/1000+time.Millisecond {
			t.Errorf("deadline %v after the grant: grant read back %v off", time.Duration(at-granted), diff)
		}
	}
}
