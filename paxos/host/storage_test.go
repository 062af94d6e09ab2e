package host

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// contractStorage wraps a Storage and records where the Host breaks the
// Batch contract: a batch written to, committed or applied again between
// its Apply and its SyncWait.
type contractStorage struct {
	paxos.Storage
	mu                      sync.Mutex
	applies, syncs, commits int
	broken                  []string
}

func (s *contractStorage) NewBatch() paxos.Batch {
	return &contractBatch{Batch: s.Storage.NewBatch(), s: s}
}

func (s *contractStorage) note(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
}

// contractBatch is a contractStorage's Batch. Its own fields need no lock:
// the contract says a batch is used by one goroutine at a time, and the
// race detector checks the Host hands it over with a happens-before edge.
type contractBatch struct {
	paxos.Batch
	s       *contractStorage
	applied bool // between Apply and SyncWait
}

func (b *contractBatch) check(op string) {
	if b.applied {
		b.s.note(func() { b.s.broken = append(b.s.broken, op+" between Apply and SyncWait") })
	}
}

func (b *contractBatch) SetHardState(g paxos.GroupID, hs paxos.HardState) {
	b.check("SetHardState")
	b.Batch.SetHardState(g, hs)
}

func (b *contractBatch) PutEntry(g paxos.GroupID, e *paxos.Entry) {
	b.check("PutEntry")
	b.Batch.PutEntry(g, e)
}

func (b *contractBatch) SetApplied(g paxos.GroupID, inst uint64) {
	b.check("SetApplied")
	b.Batch.SetApplied(g, inst)
}

func (b *contractBatch) SM(g paxos.GroupID) paxos.Writer {
	b.check("SM")
	return b.Batch.SM(g)
}

func (b *contractBatch) Commit(sync bool) error {
	b.check("Commit")
	b.s.note(func() { b.s.commits++ })
	return b.Batch.Commit(sync)
}

func (b *contractBatch) Apply() error {
	b.check("Apply")
	err := b.Batch.Apply()
	if err == nil {
		b.applied = true
		b.s.note(func() { b.s.applies++ })
	}
	return err
}

func (b *contractBatch) SyncWait() error {
	if b.applied {
		b.s.note(func() { b.s.syncs++ })
	}
	b.applied = false
	return b.Batch.SyncWait()
}

// TestHostOverStorageInterface: a Host runs on any Storage, here the
// Pebble store behind a wrapper that checks the Batch contract. Every
// proposal is applied; no batch is touched between its Apply and its
// SyncWait; every Apply is synced by the time the Host stops.
func TestHostOverStorageInterface(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	cs := &contractStorage{Storage: st}
	ep := paxostest.NewMemNetwork().Join(1, nil)
	host := New(Config{Self: 1, Store: cs, Tick: 5 * time.Millisecond, Transport: ep, Logger: testutil.Logger()})
	ep.SetHandler(host.Deliver)
	sm := newKV()
	g, err := host.AddReplica(ReplicaConfig{Core: paxos.Config{Group: 1, Peers: []paxos.NodeID{1}, HeartbeatTicks: 5, LeaseTicks: 50}}, sm)
	if err != nil {
		t.Fatal(err)
	}
	host.Start()
	stopped := false
	defer func() {
		if !stopped {
			host.Stop()
		}
	}()
	testutil.Eventually(t, 30*time.Second, func() bool { return g.Status().Serving }, "the lone replica to serve")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		g.Submit([]byte(fmt.Sprintf("k%d=v%d", i, i)), func(r paxos.Result) {
			if r.Err != nil {
				errs <- r.Err
			}
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("proposals not answered")
	}
	close(errs)
	for err := range errs {
		t.Fatalf("proposal failed: %v", err)
	}
	for i := range n {
		if v, ok := sm.get(fmt.Sprint("k", i)); !ok || v != fmt.Sprint("v", i) {
			t.Fatalf("k%d = %q, %v", i, v, ok)
		}
	}
	host.Stop()
	stopped = true
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.broken) > 0 {
		t.Fatalf("the Host broke the Batch contract: %v", cs.broken)
	}
	if cs.applies == 0 || cs.syncs != cs.applies {
		t.Fatalf("%d Applies, %d of them synced", cs.applies, cs.syncs)
	}
}
