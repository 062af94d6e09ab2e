package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/paxostest"
)

// TestStoreFailureRefusesWrites: once a WAL sync failed, the store
// reports it, refuses every write without reaching Pebble (whose WAL
// writer would panic on the next commit), keeps reading, and its data
// directory reopens with everything synced before the failure.
func TestStoreFailureRefusesWrites(t *testing.T) {
	faults := paxostest.WALFaults()
	dir := t.TempDir()
	st, err := Open(dir, Options{Logger: testutil.Logger(), FS: errorfs.Wrap(vfs.Default, faults), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	defer b.Close()
	b.PutEntry(1, &paxos.Entry{Instance: 1, Ballot: paxos.Ballot{Round: 1, Node: 1}})
	b.SetApplied(1, 1)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if st.Err() != nil {
		t.Fatalf("healthy store reports %v", st.Err())
	}
	faults.On()
	b.PutEntry(1, &paxos.Entry{Instance: 2, Ballot: paxos.Ballot{Round: 1, Node: 1}})
	// The WAL is written in the background: the failure shows in SyncWait,
	// or already in Apply if the write failed before Apply returned.
	err = b.Apply()
	if err == nil {
		err = b.SyncWait()
	}
	if !errors.Is(err, paxos.ErrStorageFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("apply and sync wait: %v, want the storage error", err)
	}
	if err := st.Err(); !errors.Is(err, paxos.ErrStorageFailed) {
		t.Fatalf("store error %v", err)
	}
	// Even once the disk works again, the store stays failed: Pebble's
	// WAL writer does not recover, and a write past it would panic. Many
	// writes, enough to fill WAL blocks.
	faults.Off()
	for i := uint64(3); i < 200; i++ {
		b.PutEntry(1, &paxos.Entry{Instance: i, Ballot: paxos.Ballot{Round: 1, Node: 1}, Value: paxos.Value{Cmds: [][]byte{make([]byte, 1024)}}})
		if err := b.Commit(i%2 == 0); !errors.Is(err, paxos.ErrStorageFailed) {
			t.Fatalf("commit %d after the failure: %v", i, err)
		}
	}
	if err := st.Sync(); !errors.Is(err, paxos.ErrStorageFailed) {
		t.Fatalf("sync after the failure: %v", err)
	}
	if err := st.TruncateLog(1, 2); !errors.Is(err, paxos.ErrStorageFailed) {
		t.Fatalf("truncate after the failure: %v", err)
	}
	if _, err := st.BeginInstall(1); !errors.Is(err, paxos.ErrStorageFailed) {
		t.Fatalf("snapshot install after the failure: %v", err)
	}
	if _, ok, err := st.Entry(1, 1); !ok || err != nil {
		t.Fatalf("read after the failure: %v %v", ok, err)
	}
	b.Close()
	if err := st.Close(); !errors.Is(err, paxos.ErrStorageFailed) {
		t.Fatalf("close: %v, want the storage error", err)
	}
	st, err = Open(dir, Options{Logger: testutil.Logger(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
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
	st, err := Open(t.TempDir(), Options{Logger: slog.New(retries), FS: errorfs.Wrap(vfs.Default, faults), MemTableSize: 256 << 10, CacheSize: 1 << 20})
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
			if !errors.Is(err, paxos.ErrStorageFailed) {
				t.Fatalf("commit %d: %v", i, err)
			}
			break
		}
	}
	testutil.Eventually(t, 60*time.Second, func() bool { return st.Err() != nil }, "the failed flush to fail the store")
	if err := st.Err(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("store error %v", err)
	}
	// Pebble retries the failed flush one attempt after another, each
	// held back by createRetryDelay before it creates its table: two more
	// retries are at least that far apart. A spinning loop makes them
	// within microseconds; a loaded machine only makes them slower.
	start := time.Now()
	before := retries.n.Load()
	testutil.Eventually(t, 60*time.Second, func() bool { return retries.n.Load()-before >= 2 },
		"two more retries of the failed flush")
	if d := time.Since(start); d < createRetryDelay {
		t.Errorf("two flush retries in %v, want them %v apart: the failed store spins", d, createRetryDelay)
	}
	if err := st.Close(); !errors.Is(err, paxos.ErrStorageFailed) {
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
	logs := testutil.NewErrorCounter()
	dir := t.TempDir()
	st, err := Open(dir, Options{Logger: slog.New(logs), FS: errorfs.Wrap(vfs.Default, faults), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	b.PutEntry(1, &paxos.Entry{Instance: 1, Ballot: paxos.Ballot{Round: 1, Node: 1}})
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	faults.On()
	if err := st.Close(); !errors.Is(err, paxos.ErrStorageFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("close: %v, want the storage error", err)
	}
	if n := logs.Count("storage failed"); n != 1 {
		t.Errorf("the failure was logged %d times, want once", n)
	}
	st, err = Open(dir, Options{Logger: testutil.Logger(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok, err := st.Entry(1, 1); !ok || err != nil {
		t.Fatalf("synced entry after reopening: %v %v", ok, err)
	}
}
