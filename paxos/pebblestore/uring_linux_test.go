package pebblestore

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestAsyncSyncer: fdatasyncs submitted through io_uring from several
// goroutines at once all complete, an error (a closed descriptor) comes
// back as the system call's errno, and close ends the reaper (goleak-free
// packages would notice).
func TestAsyncSyncer(t *testing.T) {
	a, err := newAsyncSyncer(8)
	if err != nil {
		t.Skipf("io_uring not available here: %v", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	for range 16 { // more than the ring's 8 entries: the rest fall back
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := f.Write(make([]byte, 512)); err != nil {
					t.Error(err)
					return
				}
				if err := a.fdatasync(f.Fd()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	g, err := os.CreateTemp(t.TempDir(), "closed")
	if err != nil {
		t.Fatal(err)
	}
	fd := g.Fd()
	g.Close()
	if err := a.fdatasync(fd); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("fdatasync of a closed descriptor: %v, want EBADF", err)
	}
	a.close()
	a.close() // idempotent
	select {
	case <-a.done:
	default:
		t.Fatal("reaper still running after close")
	}
}

// TestAsyncSyncerLostCompletion: an fdatasync whose io_uring completion
// never comes (the entry is queued and not submitted, as if the kernel
// lost it) returns after the stall limit by syncing with the blocking
// call, and every later fdatasync uses the blocking call.
func TestAsyncSyncerLostCompletion(t *testing.T) {
	a, err := newAsyncSyncer(8)
	if err != nil {
		t.Skipf("io_uring not available here: %v", err)
	}
	defer a.close()
	a.stall, a.skipEnter = 50*time.Millisecond, true
	f, err := os.CreateTemp(t.TempDir(), "wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.fdatasync(f.Fd()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fdatasync after a lost completion: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fdatasync still waits for a completion that never comes")
	}
	a.mu.Lock()
	broken, waiting := a.broken, len(a.waiters)
	a.mu.Unlock()
	if !broken || waiting != 0 {
		t.Fatalf("after the stall: broken %v, %d waiters (want true, 0)", broken, waiting)
	}
	if err := a.fdatasync(f.Fd()); err != nil { // the blocking call now
		t.Fatal(err)
	}
}
