package pebblestore

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walFS returns a fenceFS over the OS filesystem that syncs through
// io_uring, and its syncer; it skips where io_uring is unavailable.
func walFS(t *testing.T) (*fenceFS, *asyncSyncer) {
	t.Helper()
	a, err := newAsyncSyncer(8)
	if err != nil {
		t.Skipf("io_uring not available here: %v", err)
	}
	t.Cleanup(a.close)
	return &fenceFS{FS: vfs.Default, h: newStoreHealth(slog.New(slog.DiscardHandler)), async: a}, a
}

// TestWALWritesWaitForSync: a WAL's writes reach the file with its next
// SyncData, in order, and what was written without a sync reaches it on
// Close; Stat sees every write.
func TestWALWritesWaitForSync(t *testing.T) {
	fs, _ := walFS(t)
	name := filepath.Join(t.TempDir(), "000001.log")
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*walFile); !ok {
		t.Fatalf("a WAL of a store syncing through io_uring is a %T, want *walFile", f)
	}
	var want bytes.Buffer
	write := func(s string) {
		t.Helper()
		if n, err := f.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("write: %d, %v", n, err)
		}
		want.WriteString(s)
	}
	write("first record;")
	write(string(bytes.Repeat([]byte{'x'}, 100<<10)))
	if got, _ := os.ReadFile(name); len(got) != 0 {
		t.Fatalf("the file holds %d bytes before the sync; want none (the writes wait for it)", len(got))
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(name); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("after the sync the file holds %d bytes, want the %d written", len(got), want.Len())
	}
	if err := f.SyncData(); err != nil { // nothing waits: a plain fdatasync
		t.Fatal(err)
	}
	write("unsynced tail")
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(want.Len()) {
		t.Fatalf("Stat: %v, %v; want size %d", fi, err, want.Len())
	}
	write("; and after Stat")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(name); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("after Close the file holds %d bytes, want the %d written", len(got), want.Len())
	}
}

// TestWALReusedFromStart: a WAL reused for writing is written from its
// start, over what the old file held.
func TestWALReusedFromStart(t *testing.T) {
	fs, _ := walFS(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "000001.log")
	if err := os.WriteFile(old, bytes.Repeat([]byte{'o'}, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := fs.ReuseForWrite(old, filepath.Join(dir, "000002.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	got, _ := os.ReadFile(filepath.Join(dir, "000002.log"))
	if want := append([]byte("new"), bytes.Repeat([]byte{'o'}, 61)...); !bytes.Equal(got, want) {
		t.Fatalf("reused WAL holds %q, want %q", got, want)
	}
}

// TestWALWriteSyncLostCompletion: a write and sync whose completions
// never come (queued, not submitted) fall back to blocking calls after
// the stall limit, with the bytes on the file all the same, and the WAL
// goes on with blocking calls.
func TestWALWriteSyncLostCompletion(t *testing.T) {
	fs, a := walFS(t)
	a.stall, a.skipEnter = 50*time.Millisecond, true
	name := filepath.Join(t.TempDir(), "000001.log")
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("held by a lost submission")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.SyncData() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SyncData after a lost completion: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("SyncData still waits for completions that never come")
	}
	if _, err := f.Write([]byte("; then blocking")); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(name); string(got) != "held by a lost submission; then blocking" {
		t.Fatalf("file holds %q", got)
	}
}

// TestWALWriteErrorLatches: a write the kernel refuses comes back from
// SyncData and latches the store's failure.
func TestWALWriteErrorLatches(t *testing.T) {
	fs, a := walFS(t)
	const badFD = 1 << 20 // above any descriptor this process has open
	done, err := a.writeSync(badFD, []byte("x"), 0)
	if !done || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("writeSync to a closed descriptor: done %v, %v; want done, EBADF", done, err)
	}
	name := filepath.Join(t.TempDir(), "000001.log")
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w := f.(*walFile)
	w.fd = badFD
	if _, err := f.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err == nil {
		t.Fatal("SyncData of a write the kernel refused succeeded")
	}
	if fs.h.failed() == nil {
		t.Fatal("the refused write did not latch the store's failure")
	}
	_ = f.Close()
}

// TestWALBufferBounded: a burst's buffer larger than walPendRetained is
// given back once its bytes are on the file; a smaller one is kept.
func TestWALBufferBounded(t *testing.T) {
	fs, _ := walFS(t)
	f, err := fs.Create(filepath.Join(t.TempDir(), "000001.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := f.(*walFile)
	if _, err := f.Write(make([]byte, 4<<10)); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	if cap(w.pend) == 0 {
		t.Fatal("a small round's buffer was not kept for the next")
	}
	if _, err := f.Write(make([]byte, walPendRetained+1)); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	if cap(w.pend) != 0 {
		t.Fatalf("a buffer of %d bytes kept after the sync; the bound is %d", cap(w.pend), walPendRetained)
	}
}
