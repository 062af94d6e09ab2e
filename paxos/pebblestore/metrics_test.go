package pebblestore

import (
	"strings"
	"testing"

	"github.com/paxlock/paxlock/paxos"
)

// TestStoreMetricsAndDirUsage: the engine's metrics move with writes and
// a flush, DirUsage finds the WAL, its spare, the MANIFEST and the flushed
// table, and Metrics answers nil once the store is closed.
func TestStoreMetricsAndDirUsage(t *testing.T) {
	dir := t.TempDir()
	s := openStoreForTest(t, dir, storeTestOptions())
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	const g = paxos.GroupID(1)
	b := s.NewBatch()
	defer b.Close()
	for i := uint64(1); i <= 200; i++ {
		e := storeTestEntry(i, strings.Repeat("x", 512))
		b.PutEntry(g, &e)
	}
	storeMustCommit(t, b, true)

	m := s.Metrics()
	if m == nil || m.WAL.BytesWritten < 200*512 || m.WAL.Files < 1 || m.MemTable.Size == 0 {
		t.Fatalf("after writes: metrics %+v", m)
	}
	if m.Flush.Count != 0 || m.Levels[0].TablesCount != 0 {
		t.Fatalf("before a flush: %d flushes, %d L0 tables", m.Flush.Count, m.Levels[0].TablesCount)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	m = s.Metrics()
	if m.Flush.Count < 1 || m.Levels[0].TablesCount < 1 || m.Levels[0].TableBytesFlushed == 0 || m.Table.Local.LiveSize == 0 {
		t.Fatalf("after a flush: %d flushes, %d L0 tables, %d bytes flushed, %d bytes of live tables",
			m.Flush.Count, m.Levels[0].TablesCount, m.Levels[0].TableBytesFlushed, m.Table.Local.LiveSize)
	}

	u, err := s.DirUsage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Tables == 0 || u.WAL == 0 || u.WALSpares == 0 || u.Manifest == 0 {
		t.Fatalf("directory usage %+v: a kind is missing", u)
	}
	if u.Total() != u.Tables+u.BlobFiles+u.WAL+u.WALSpares+u.Manifest+u.Other {
		t.Fatalf("total %d is not the sum of %+v", u.Total(), u)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if m := s.Metrics(); m != nil {
		t.Fatal("Metrics of a closed store is not nil")
	}
}
