package paxos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// walFaults injects errorfs.ErrInjected into every write and sync of the
// WAL files once switched on. errorfs does not wrap the files
// ReuseForWrite returns (recycled WAL files): the tests switch it on
// before Pebble rotates its first WAL.
func walFaults() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			return errorfs.ErrInjected
		}
		return nil
	})}
}

// voteSpy records the votes and promises a node's transport sent, and
// drops the Accepts of group dropAccepts (when not 0).
type voteSpy struct {
	next        Transport
	dropAccepts atomic.Uint32
	mu          sync.Mutex
	// accepted: per (group, instance), the highest ballot voted for;
	// promised: per group, the highest ballot promised.
	accepted map[[2]uint64]Ballot
	promised map[GroupID]Ballot
}

func (s *voteSpy) Send(msgs []Message) {
	if g := GroupID(s.dropAccepts.Load()); g != 0 {
		kept := make([]Message, 0, len(msgs))
		for _, m := range msgs {
			if m.Type != MsgAccept || m.Group != g {
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
		case MsgAccepted:
			k := [2]uint64{uint64(m.Group), m.Instance}
			if b, ok := s.accepted[k]; !ok || b.Less(m.Ballot) {
				s.accepted[k] = m.Ballot
			}
		case MsgPromise:
			if s.promised[m.Group].Less(m.Ballot) {
				s.promised[m.Group] = m.Ballot
			}
		}
	}
	s.mu.Unlock()
	s.next.Send(msgs)
}

func (s *voteSpy) Close() error { return s.next.Close() }

// logCounter counts the error records a logger receives, by message.
type logCounter struct {
	mu     sync.Mutex
	errors map[string]int
}

func (c *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.errors[r.Message]++
	c.mu.Unlock()
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

func (c *logCounter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.errors {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}

// waitCond waits for cond with a generous deadline.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// isStorageStop checks err is what a proposal gets from a replica that a
// storage failure stopped.
func isStorageStop(err error) bool {
	return errors.Is(err, ErrStorageFailed) && errors.Is(err, ErrStopped) && errors.Is(err, errorfs.ErrInjected)
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
	faults := walFaults()
	logs := &logCounter{errors: map[string]int{}}
	spy := &voteSpy{accepted: map[[2]uint64]Ballot{}, promised: map[GroupID]Ballot{}}
	tc := newTestCluster(t, 3, groups, 0, func(tc *testCluster) {
		tc.nodes[1].fs = errorfs.Wrap(vfs.Default, faults)
		tc.nodes[1].log = slog.New(logs)
		tc.wrapTr = func(id NodeID, tr Transport) Transport {
			if id != 1 {
				return tr
			}
			spy.next = tr
			return spy
		}
	})
	n1 := tc.nodes[1]
	// Placement puts groups 3 and 6 on node 1.
	waitCond(t, "node 1 masters groups 3 and 6", func() bool {
		return n1.host.Replica(3).Status().Serving && n1.host.Replica(6).Status().Serving
	})
	acked := map[GroupID]map[string]string{}
	ack := func(g GroupID, k, v string) {
		if acked[g] == nil {
			acked[g] = map[string]string{}
		}
		acked[g][k] = v
	}
	for i := range 5 {
		for g := GroupID(1); g <= groups; g++ {
			k, v := fmt.Sprintf("k%d", i), fmt.Sprint(g*100+GroupID(i))
			tc.put(g, k, v)
			ack(g, k, v)
		}
	}

	faults.On()
	// Every group writes to node 1 (master or follower), and each write
	// fails it. The first group's master is node 2: node 1 fails as a
	// follower, with a vote to send that its disk does not back.
	for g := GroupID(1); g <= groups; g++ {
		tc.put(g, "fault", "x")
		ack(g, "fault", "x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitCond(t, "node 1 stopped its groups", func() bool { return n1.host.Err() != nil })
	if err := n1.host.Err(); !isStorageStop(err) {
		t.Fatalf("host error %v, want the storage error", err)
	}
	if err := n1.store.Err(); !errors.Is(err, ErrStorageFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("store error %v", err)
	}
	for g := GroupID(1); g <= groups; g++ {
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
	for g := GroupID(1); g <= groups; g++ {
		tc.put(g, "after", "y")
		ack(g, "after", "y")
		if m := tc.master(g, 60*time.Second); m.host == n1.host {
			t.Errorf("group %d is still mastered by the failed node", g)
		}
	}
	for g, kv := range acked {
		for k, v := range kv {
			for _, id := range []NodeID{2, 3} {
				tc.waitValue(id, g, k, v)
			}
		}
	}
	if n := logs.count("storage failed"); n != 1 {
		t.Errorf("node 1 logged the storage failure %d times, want once", n)
	}

	// Every vote and promise node 1 sent is in its data directory: the
	// entry in that ballot (or a later one), or, for an instance node 1
	// already knew chosen (it votes for those without writing them again),
	// the value the voting ballot's master holds.
	tc.stop(1)
	st, err := OpenStore(n1.dir, StoreOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	spy.mu.Lock()
	for k, b := range spy.accepted {
		e, ok, err := st.Entry(GroupID(k[0]), k[1])
		if err != nil {
			t.Fatal(err)
		}
		if ok && e.Ballot.Less(b) && b.Node != 1 {
			me, mok, err := tc.nodes[b.Node].store.Entry(GroupID(k[0]), k[1])
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
	for g := GroupID(1); g <= groups; g++ {
		tc.waitValue(1, g, "after", "y")
	}
	waitCond(t, "node 1 masters a group again", func() bool {
		return tc.nodes[1].host.Replica(3).Status().Serving || tc.nodes[1].host.Replica(6).Status().Serving
	})
}

// TestClusterStorageFailureFailsPending: a proposal pending on a master
// whose WAL write fails (its followers never see the Accept, so nothing
// can choose it) fails with the storage error.
func TestClusterStorageFailureFailsPending(t *testing.T) {
	faults := walFaults()
	spy := &voteSpy{accepted: map[[2]uint64]Ballot{}, promised: map[GroupID]Ballot{}}
	tc := newTestCluster(t, 3, 3, 0, func(tc *testCluster) {
		tc.nodes[1].fs = errorfs.Wrap(vfs.Default, faults)
		tc.wrapTr = func(id NodeID, tr Transport) Transport {
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
	for {
		// Placement puts group 3 on node 1; a loaded machine may cost it
		// its lease for a moment.
		_, err := n1.host.Replica(3).Propose(ctx, []byte("during=1"))
		if errors.Is(err, ErrNotMaster) && n1.host.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if !isStorageStop(err) {
			t.Fatalf("pending proposal: %v, want the storage error", err)
		}
		break
	}
	// The other two take the group over; the failed command is not chosen.
	tc.put(3, "after", "2")
	for _, id := range []NodeID{2, 3} {
		tc.waitValue(id, 3, "after", "2")
		if _, ok := tc.nodes[id].sms[3].get("during"); ok {
			t.Errorf("node %d applied a command that failed", id)
		}
	}
}

// TestStoreFailureRefusesWrites: once a WAL sync failed, the store
// reports it, refuses every write without reaching Pebble (whose WAL
// writer would panic on the next commit), keeps reading, and its data
// directory reopens with everything synced before the failure.
func TestStoreFailureRefusesWrites(t *testing.T) {
	faults := walFaults()
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{Logger: quietLogger(), FS: errorfs.Wrap(vfs.Default, faults), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	defer b.Close()
	b.PutEntry(1, &Entry{Instance: 1, Ballot: Ballot{Round: 1, Node: 1}})
	b.SetApplied(1, 1)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if st.Err() != nil {
		t.Fatalf("healthy store reports %v", st.Err())
	}
	faults.On()
	b.PutEntry(1, &Entry{Instance: 2, Ballot: Ballot{Round: 1, Node: 1}})
	// The WAL is written in the background: the failure shows in SyncWait,
	// or already in Apply if the write failed before Apply returned.
	err = b.Apply()
	if err == nil {
		err = b.SyncWait()
	}
	if !errors.Is(err, ErrStorageFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("apply and sync wait: %v, want the storage error", err)
	}
	if err := st.Err(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("store error %v", err)
	}
	// Even once the disk works again, the store stays failed: Pebble's
	// WAL writer does not recover, and a write past it would panic. Many
	// writes, enough to fill WAL blocks.
	faults.Off()
	for i := uint64(3); i < 200; i++ {
		b.PutEntry(1, &Entry{Instance: i, Ballot: Ballot{Round: 1, Node: 1}, Value: Value{Cmds: [][]byte{make([]byte, 1024)}}})
		if err := b.Commit(i%2 == 0); !errors.Is(err, ErrStorageFailed) {
			t.Fatalf("commit %d after the failure: %v", i, err)
		}
	}
	if err := st.Sync(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("sync after the failure: %v", err)
	}
	if err := st.TruncateLog(1, 2); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("truncate after the failure: %v", err)
	}
	if _, err := st.BeginInstall(1); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("snapshot install after the failure: %v", err)
	}
	if _, ok, err := st.Entry(1, 1); !ok || err != nil {
		t.Fatalf("read after the failure: %v %v", ok, err)
	}
	b.Close()
	if err := st.Close(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("close: %v, want the storage error", err)
	}
	st, err = OpenStore(dir, StoreOptions{Logger: quietLogger(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok, err := st.Entry(1, 1); !ok || err != nil {
		t.Fatalf("synced entry after reopening: %v %v", ok, err)
	}
	if _, ok, _ := st.Entry(1, 100); ok {
		t.Fatal("an entry written after the failure reached the disk")
	}
}

// retryCounter counts the log records, at any level, that report a
// failed background job of Pebble.
type retryCounter struct{ n atomic.Int64 }

func (c *retryCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *retryCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "background error") {
		c.n.Add(1)
	}
	return nil
}
func (c *retryCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *retryCounter) WithGroup(string) slog.Handler      { return c }

// TestStoreFailureInFlushIdles: a memtable flush that cannot write its
// table fails the store too, and then, though Pebble retries a failed
// flush at once and forever, the failed store's filesystem holds each
// retry back: the node idles instead of spinning a CPU, and Close returns.
func TestStoreFailureInFlushIdles(t *testing.T) {
	faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemove {
			return errorfs.ErrInjected
		}
		return nil
	})}
	retries := &retryCounter{}
	st, err := OpenStore(t.TempDir(), StoreOptions{Logger: slog.New(retries), FS: errorfs.Wrap(vfs.Default, faults), MemTableSize: 256 << 10, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	faults.On()
	b := st.NewBatch()
	defer b.Close()
	val := make([]byte, 4096)
	// Four memtables' worth: the first flush fails the store, and the
	// writes after it are refused.
	for i := range 256 {
		b.SM(1).Set(fmt.Appendf(nil, "k%d", i), val)
		if err := b.Commit(false); err != nil {
			if !errors.Is(err, ErrStorageFailed) {
				t.Fatalf("commit %d: %v", i, err)
			}
			break
		}
	}
	waitCond(t, "the failed flush fails the store", func() bool { return st.Err() != nil })
	if err := st.Err(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("store error %v", err)
	}
	// Not a wait for anything: a window in which a spinning retry loop
	// would log thousands of failures (a slow machine makes fewer).
	before := retries.n.Load()
	time.Sleep(2 * time.Second)
	if n := retries.n.Load() - before; n > 10 {
		t.Errorf("%d flush retries in 2s: the failed store spins", n)
	}
	if err := st.Close(); !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("close: %v", err)
	}
}

// TestStoreManifestFailureDoesNotExit: Pebble calls its logger's Fatalf
// when it cannot write its MANIFEST (here, at the flush of Close). The
// store fails instead of ending the process, and the directory reopens
// with what was synced.
func TestStoreManifestFailureDoesNotExit(t *testing.T) {
	faults := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasPrefix(filepath.Base(op.Path), "MANIFEST-") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemove {
			return errorfs.ErrInjected
		}
		return nil
	})}
	logs := &logCounter{errors: map[string]int{}}
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{Logger: slog.New(logs), FS: errorfs.Wrap(vfs.Default, faults), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	b.PutEntry(1, &Entry{Instance: 1, Ballot: Ballot{Round: 1, Node: 1}})
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	faults.On()
	if err := st.Close(); !errors.Is(err, ErrStorageFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("close: %v, want the storage error", err)
	}
	if n := logs.count("storage failed"); n != 1 {
		t.Errorf("the failure was logged %d times, want once", n)
	}
	st, err = OpenStore(dir, StoreOptions{Logger: quietLogger(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok, err := st.Entry(1, 1); !ok || err != nil {
		t.Fatalf("synced entry after reopening: %v %v", ok, err)
	}
}
