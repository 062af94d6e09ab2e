package pebblestore

import (
	"bytes"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/paxos"
)

// TestWALSparesSurviveCrash writes through enough WALs that Pebble creates
// and recycles several (from spares: zero-filled files written over from
// their start), then recovers from a crash image in which unsynced data
// may be lost: every synced entry must come back, read past the spares'
// zeroed tails.
func TestWALSparesSurviveCrash(t *testing.T) {
	for seed := uint64(0); seed < 3; seed++ {
		fs := vfs.NewCrashableMem()
		opts := storeTestOptions()
		opts.FS, opts.walSparesOnFS, opts.MemTableSize = fs, true, 1<<20
		s := openStoreForTest(t, "node", opts)
		if s.spares == nil {
			t.Fatal("store opened without WAL spares")
		}
		const g = paxos.GroupID(4)
		const n = 3000 // ~3 MB of entries: WALs of 256 KiB, 512 KiB, 1 MiB, ...
		// Ten entries a synced commit, as a master's batches carry them:
		// the same bytes through the same WALs with a tenth of the syncs
		// (each copies the file in the crashable filesystem, which -race
		// makes slow).
		const perCommit = 10
		b := s.NewBatch()
		var entries []paxos.Entry
		cmd := bytes.Repeat([]byte{'x'}, 1000)
		for i := uint64(1); i <= n; i++ {
			e := storeTestEntry(i, string(cmd), fmt.Sprint(i))
			b.PutEntry(g, &e)
			entries = append(entries, e)
			if i%perCommit == 0 || i == n {
				b.SetHardState(g, paxos.HardState{Promised: paxos.Ballot{Round: i, Node: 1}})
				// The next WAL finds its spare ready however slowly the
				// preparer runs beside this loop (a loaded machine).
				waitSpareReady(s.spares)
				storeMustCommit(t, b, true)
			}
		}
		b.Close()
		if taken := s.spares.taken.Load(); taken < 3 {
			t.Fatalf("seed %d: %d WALs came from spares, want at least 3", seed, taken)
		}
		s, crashed := storeCrashReopen(t, fs, s, opts, seed, 30)
		st, err := s.LoadGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		if st.Last != n || st.Hard.Promised.Round != n {
			t.Fatalf("seed %d: after crash %+v, want last %d", seed, st, n)
		}
		got, err := s.Entries(g, 1, n, 0)
		if err != nil || !reflect.DeepEqual(got, entries) {
			t.Fatalf("seed %d: entries after crash: %d of %d, %v", seed, len(got), n, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := crashed.Stat(crashed.PathJoin("node", walSpareDir)); err == nil {
			t.Fatalf("seed %d: spares left behind after Close", seed)
		}
	}
}

// TestWALSparesOnDisk runs the store on the operating system's filesystem,
// where spares are on by default, through several WALs, a close and a
// reopen.
func TestWALSparesOnDisk(t *testing.T) {
	dir := t.TempDir()
	opts := storeTestOptions()
	opts.MemTableSize = 1 << 20
	s := openStoreForTest(t, dir, opts)
	if s.spares == nil {
		t.Fatal("store on the OS filesystem opened without WAL spares")
	}
	const g = paxos.GroupID(2)
	const n = 2000
	b := s.NewBatch()
	cmd := bytes.Repeat([]byte{'y'}, 1000)
	for i := uint64(1); i <= n; i++ {
		e := storeTestEntry(i, string(cmd))
		b.PutEntry(g, &e)
		storeMustCommit(t, b, true)
	}
	b.Close()
	if taken := s.spares.taken.Load(); taken < 2 {
		t.Fatalf("%d WALs came from spares, want at least 2", taken)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStoreForTest(t, dir, opts)
	defer s.Close()
	got, err := s.Entries(g, 1, n, 0)
	if err != nil || len(got) != n {
		t.Fatalf("entries after reopen: %d of %d, %v", len(got), n, err)
	}
}

// TestWALSparesTake checks the pool's bookkeeping: a spare goes to a WAL
// only when it is larger than the file it replaces, and the next one is
// sized from the last WAL, within walSpareMin and the WAL's full size.
func TestWALSparesTake(t *testing.T) {
	fs := vfs.NewMem()
	s := openWALSpares(fs, "d", 8<<20, slog.New(slog.DiscardHandler))
	if s == nil {
		t.Fatal("no spares")
	}
	defer s.close()
	if _, _, ok := s.take(walSpareMin, 0); ok {
		t.Fatal("took a spare no larger than the file it replaces")
	}
	s.wg.Wait()
	path, size, ok := s.take(0, 3<<20)
	if !ok || size != walSpareMin {
		t.Fatalf("take = %q, %d, %v; want the first spare of %d bytes", path, size, ok, walSpareMin)
	}
	if fi, err := fs.Stat(path); err != nil || fi.Size() != walSpareMin {
		t.Fatalf("spare file: %v, %v", fi, err)
	}
	s.wg.Wait()
	// 5 × 3 MiB is more than the WAL's full size (110% of 8 MiB).
	if _, size, ok := s.take(0, 0); !ok || size != (8<<20)+(8<<20)/10 {
		t.Fatalf("second spare: %d bytes, %v; want the WAL's full size", size, ok)
	}
}

// TestWALSparesOnlyForGrowingWALs checks when recycling gives way to a
// spare: only while the recycled file is smaller than what Pebble wrote
// to its last WAL (its WALs are still growing). Once they have stopped,
// Pebble's recycled WALs are written over as they are and the spare is
// left alone, so that no WAL's worth of zeros is written per rotation.
func TestWALSparesOnlyForGrowingWALs(t *testing.T) {
	mem := vfs.NewMem()
	log := slog.New(slog.DiscardHandler)
	if err := mem.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	fs := &fenceFS{FS: mem, h: newStoreHealth(log), spares: openWALSpares(mem, "d", 8<<20, log)}
	defer fs.spares.close()
	writeFile := func(name string, n int) {
		t.Helper()
		f, err := mem.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The first WAL comes from the spare prepared at open.
	w, err := fs.Create("d/000001.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 300<<10)); err != nil {
		t.Fatal(err)
	}
	if got := fs.spares.taken.Load(); got != 1 {
		t.Fatalf("spares taken after the first Create: %d, want 1", got)
	}
	fs.spares.wg.Wait()

	// Recycling a file no smaller than the last WAL's 300 KiB: recycled.
	writeFile("d/000002.log", 400<<10)
	r, err := fs.ReuseForWrite("d/000002.log", "d/000003.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.spares.taken.Load(); got != 1 {
		t.Fatalf("a large enough recycled WAL was replaced by a spare (taken %d)", got)
	}
	if fi, err := r.Stat(); err != nil || fi.Size() != 400<<10 {
		t.Fatalf("recycled WAL: %v, %v; want the old file's 400 KiB", fi, err)
	}
	if _, err := r.Write(make([]byte, 500<<10)); err != nil {
		t.Fatal(err)
	}

	// Recycling a file smaller than the last WAL's 500 KiB: the spare.
	writeFile("d/000004.log", 100<<10)
	r, err = fs.ReuseForWrite("d/000004.log", "d/000005.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.spares.taken.Load(); got != 2 {
		t.Fatalf("spares taken: %d, want 2", got)
	}
	if _, err := mem.Stat("d/000004.log"); err == nil {
		t.Fatal("the replaced WAL is still there")
	}
	if fi, err := r.Stat(); err != nil || fi.Size() < 500<<10 {
		t.Fatalf("WAL from a spare: %v, %v; want a spare larger than the last WAL", fi, err)
	}
	if got := fs.spares.missed.Load(); got != 0 {
		t.Fatalf("misses counted while every WAL that needed a spare got one: %d", got)
	}

	// The next spare is sized for five times the last WAL's 500 KiB. A
	// WAL that outgrew it, recycled from a file that is larger than the
	// spare but smaller than the WAL: no spare fits, a miss, and the old
	// file is recycled.
	fs.spares.wg.Wait()
	if _, err := r.Write(make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	writeFile("d/000006.log", 3<<20)
	if _, err := fs.ReuseForWrite("d/000006.log", "d/000007.log", vfs.WriteCategoryUnspecified); err != nil {
		t.Fatal(err)
	}
	if taken, missed := fs.spares.taken.Load(), fs.spares.missed.Load(); taken != 2 || missed != 1 {
		t.Fatalf("after a recycled WAL no spare fitted: taken %d, missed %d; want 2 and 1", taken, missed)
	}
	if _, err := mem.Stat("d/000007.log"); err != nil {
		t.Fatalf("the recycled WAL: %v", err)
	}
}

// waitSpareReady waits until no spare is being prepared.
func waitSpareReady(ws *walSpares) {
	for {
		ws.mu.Lock()
		working := ws.working
		ws.mu.Unlock()
		if !working {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
