package pebblestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/paxos"
)

func storeTestOptions() Options {
	return Options{Logger: slog.New(slog.DiscardHandler), MemTableSize: 4 << 20, CacheSize: 8 << 20}
}

func openStoreForTest(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	return s
}

func storeMustCommit(t testing.TB, b paxos.Batch, sync bool) {
	t.Helper()
	if err := b.Commit(sync); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func storeTestEntry(inst uint64, cmds ...string) paxos.Entry {
	e := paxos.Entry{Instance: inst, Ballot: paxos.Ballot{Round: 3, Node: 2}, Value: paxos.Value{Origin: paxos.Ballot{Round: 3, Node: 2}, Seq: inst * 10}}
	for _, c := range cmds {
		e.Value.Cmds = append(e.Value.Cmds, []byte(c))
	}
	return e
}

// storeSMContents returns group g's state-machine keyspace as a map.
func storeSMContents(t testing.TB, s *Store, g paxos.GroupID) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := s.SMReader(g).Scan(nil, func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

func TestStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openStoreForTest(t, dir, storeTestOptions())
	const g = paxos.GroupID(4)

	st, err := s.LoadGroup(g)
	if err != nil {
		t.Fatal(err)
	}
	if want := (paxos.GroupState{LogStart: 1}); st != want {
		t.Fatalf("fresh group state %+v, want %+v", st, want)
	}
	if _, ok, err := s.Entry(g, 1); ok || err != nil {
		t.Fatalf("Entry on empty log: ok=%v err=%v", ok, err)
	}
	if _, ok, err := s.Meta(g, "groupVersion"); ok || err != nil {
		t.Fatalf("Meta on empty store: ok=%v err=%v", ok, err)
	}

	hs := paxos.HardState{Promised: paxos.Ballot{Round: 7, Node: 3}, Committed: 5}
	b := s.NewBatch()
	defer b.Close()
	if !b.Empty() {
		t.Fatal("new batch not empty")
	}
	b.SetHardState(g, hs)
	var want []paxos.Entry
	for i := uint64(1); i <= 10; i++ {
		e := storeTestEntry(i, fmt.Sprintf("cmd%d", i), "x")
		b.PutEntry(g, &e)
		want = append(want, e)
	}
	b.SetApplied(g, 5)
	setMeta(b, g, "groupVersion", []byte{0, 1})
	setMeta(b, g, "empty", nil)
	sm := b.SM(g)
	sm.Set([]byte("lock/a"), []byte("owner1"))
	sm.Set([]byte("lock/b"), []byte("owner2"))
	sm.Set([]byte("other"), []byte("zzz"))
	sm.Set([]byte("gone"), []byte("soon"))
	sm.Delete([]byte("gone"))
	if b.Empty() {
		t.Fatal("batch with writes reports Empty")
	}
	storeMustCommit(t, b, true)
	if !b.Empty() {
		t.Fatal("batch not reset after Commit")
	}
	storeMustCommit(t, b, true) // an empty Sync commit is a barrier, not an error

	check := func(s *Store) {
		t.Helper()
		st, err := s.LoadGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		if want := (paxos.GroupState{Hard: hs, LogStart: 1, Last: 10, Applied: 5}); st != want {
			t.Fatalf("group state %+v, want %+v", st, want)
		}
		e, ok, err := s.Entry(g, 3)
		if err != nil || !ok || !reflect.DeepEqual(e, want[2]) {
			t.Fatalf("Entry(3) = %+v, %v, %v", e, ok, err)
		}
		got, err := s.Entries(g, 1, 10, 0)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Entries = %+v, %v", got, err)
		}
		v, ok, err := s.Meta(g, "groupVersion")
		if err != nil || !ok || !bytes.Equal(v, []byte{0, 1}) {
			t.Fatalf("Meta = %v, %v, %v", v, ok, err)
		}
		v, ok, err = s.Meta(g, "empty")
		if err != nil || !ok || v == nil || len(v) != 0 {
			t.Fatalf("empty Meta = %v, %v, %v", v, ok, err)
		}
		r := s.SMReader(g)
		v, ok, err = r.Get([]byte("lock/a"))
		if err != nil || !ok || string(v) != "owner1" {
			t.Fatalf("SM Get = %q, %v, %v", v, ok, err)
		}
		if _, ok, err := r.Get([]byte("gone")); ok || err != nil {
			t.Fatalf("deleted key: ok=%v err=%v", ok, err)
		}
		var keys []string
		if err := r.Scan([]byte("lock/"), func(k, v []byte) error {
			keys = append(keys, string(k)+"="+string(v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := []string{"lock/a=owner1", "lock/b=owner2"}; !reflect.DeepEqual(keys, want) {
			t.Fatalf("Scan = %v, want %v", keys, want)
		}
		stop := errors.New("stop")
		n := 0
		if err := r.Scan(nil, func(k, v []byte) error { n++; return stop }); err != stop || n != 1 {
			t.Fatalf("Scan with stopping fn: err=%v n=%d", err, n)
		}
	}
	check(s)
	b.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStoreForTest(t, dir, storeTestOptions())
	defer s.Close()
	check(s)
}

func TestStoreEntries(t *testing.T) {
	s := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer s.Close()
	const g = paxos.GroupID(1)
	b := s.NewBatch()
	defer b.Close()
	for _, i := range []uint64{1, 2, 3, 4, 6, 7, math.MaxUint64} {
		e := storeTestEntry(i, "0123456789")
		b.PutEntry(g, &e)
	}
	storeMustCommit(t, b, false)
	insts := func(es []paxos.Entry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.Instance)
		}
		return out
	}
	size := len(paxos.AppendEntry(nil, &paxos.Entry{Instance: 1, Ballot: paxos.Ballot{Round: 3, Node: 2}, Value: paxos.Value{Origin: paxos.Ballot{Round: 3, Node: 2}, Seq: 10, Cmds: [][]byte{[]byte("0123456789")}}}))
	cases := []struct {
		from, to uint64
		max      int
		want     []uint64
	}{
		{1, 10, 0, []uint64{1, 2, 3, 4}},       // stops at the gap
		{2, 3, 0, []uint64{2, 3}},              // stops at to
		{6, math.MaxUint64, 0, []uint64{6, 7}}, // gap after 7
		{1, 10, 1, []uint64{1}},                // at least one
		{1, 10, 2 * size, []uint64{1, 2}},      // stops once maxBytes reached
		{1, 10, 2*size + 1, []uint64{1, 2, 3}}, // ...not before
		{5, 10, 0, nil},                        // from missing
		{3, 2, 0, nil},                         // empty range
		{math.MaxUint64, math.MaxUint64, 0, []uint64{math.MaxUint64}},
	}
	for _, c := range cases {
		got, err := s.Entries(g, c.from, c.to, c.max)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(insts(got), c.want) {
			t.Errorf("Entries(%d, %d, %d) = %v, want %v", c.from, c.to, c.max, insts(got), c.want)
		}
	}
	st, err := s.LoadGroup(g)
	if err != nil || st.Last != math.MaxUint64 {
		t.Fatalf("Last = %d, %v", st.Last, err)
	}
	all, err := s.EntriesFrom(g, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{3, 4, 6, 7, math.MaxUint64}; !reflect.DeepEqual(insts(all), want) {
		t.Fatalf("EntriesFrom(3) = %v, want %v", insts(all), want)
	}
	if all, err := s.EntriesFrom(g+1, 0); all != nil || err != nil {
		t.Fatalf("EntriesFrom on another group = %v, %v", all, err)
	}
}

func TestStoreCorruptEntry(t *testing.T) {
	s := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer s.Close()
	const g = paxos.GroupID(2)
	if err := s.db.Set(appendLogKey(nil, g, 1), []byte{1, 1, 0} /* encoding version 1, then a truncated entry */, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	e := storeTestEntry(5)
	if err := s.db.Set(appendLogKey(nil, g, 2), paxos.AppendEntry(nil, &e), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Entry(g, 1); !errors.Is(err, paxos.ErrCorrupt) {
		t.Fatalf("truncated entry: err = %v", err)
	}
	if _, _, err := s.Entry(g, 2); !errors.Is(err, paxos.ErrCorrupt) {
		t.Fatalf("entry under the wrong instance: err = %v", err)
	}
	if _, err := s.Entries(g, 1, 2, 0); !errors.Is(err, paxos.ErrCorrupt) {
		t.Fatalf("Entries over corrupt entry: err = %v", err)
	}
	if err := s.db.Set(hardKey(g), []byte{9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadGroup(g); !errors.Is(err, paxos.ErrCorrupt) {
		t.Fatalf("corrupt hard state: err = %v", err)
	}
}

func TestStoreGroupsIsolated(t *testing.T) {
	s := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer s.Close()
	groups := []paxos.GroupID{0, 1, 2, 255, 256, math.MaxUint32}
	b := s.NewBatch()
	defer b.Close()
	for _, g := range groups {
		b.SetHardState(g, paxos.HardState{Promised: paxos.Ballot{Round: uint64(g), Node: 1}, Committed: uint64(g)})
		for i := uint64(1); i <= 5; i++ {
			e := storeTestEntry(i, fmt.Sprint(g))
			b.PutEntry(g, &e)
		}
		b.SetApplied(g, 5)
		setMeta(b, g, "m", []byte(fmt.Sprint(g)))
		// Keys that would collide across groups without the prefix,
		// including the extremes of the byte range.
		b.SM(g).Set([]byte("k"), []byte(fmt.Sprint(g)))
		b.SM(g).Set([]byte{0xff, 0xff}, []byte(fmt.Sprint(g)))
		b.SM(g).Set([]byte{}, []byte(fmt.Sprint(g)))
	}
	storeMustCommit(t, b, true)
	// Truncate and reinstall one group; the others must not notice.
	if err := s.TruncateLog(1, 4); err != nil {
		t.Fatal(err)
	}
	in, err := s.BeginInstall(255)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Finish(9); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		st, err := s.LoadGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		want := paxos.GroupState{Hard: paxos.HardState{Promised: paxos.Ballot{Round: uint64(g), Node: 1}, Committed: uint64(g)}, LogStart: 1, Last: 5, Applied: 5}
		wantSM := map[string]string{"k": fmt.Sprint(g), "\xff\xff": fmt.Sprint(g), "": fmt.Sprint(g)}
		switch g {
		case 1:
			want.LogStart = 4
		case 255:
			want.Hard.Committed = 255
			want.Applied, want.LogStart, want.Last = 9, 10, 0
			wantSM = map[string]string{}
		}
		if st != want {
			t.Errorf("group %d: %+v, want %+v", g, st, want)
		}
		if got := storeSMContents(t, s, g); !reflect.DeepEqual(got, wantSM) {
			t.Errorf("group %d SM: %v, want %v", g, got, wantSM)
		}
		if v, _, _ := s.Meta(g, "m"); string(v) != fmt.Sprint(g) {
			t.Errorf("group %d meta %q", g, v)
		}
		es, err := s.Entries(g, want.LogStart, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if g != 255 && (len(es) != int(6-want.LogStart) || string(es[0].Value.Cmds[0]) != fmt.Sprint(g)) {
			t.Errorf("group %d entries %+v", g, es)
		}
	}
}

func TestStoreTruncateLog(t *testing.T) {
	s := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer s.Close()
	const g = paxos.GroupID(3)
	b := s.NewBatch()
	defer b.Close()
	for i := uint64(1); i <= 10; i++ {
		e := storeTestEntry(i)
		b.PutEntry(g, &e)
	}
	b.SetApplied(g, 6)
	storeMustCommit(t, b, false)

	if err := s.TruncateLog(g, 8); err == nil {
		t.Fatal("truncation past applied+1 succeeded")
	}
	if err := s.TruncateLog(g, 7); err != nil {
		t.Fatal(err)
	}
	st, _ := s.LoadGroup(g)
	if st.LogStart != 7 || st.Last != 10 {
		t.Fatalf("after truncation %+v", st)
	}
	for i := uint64(1); i <= 10; i++ {
		_, ok, err := s.Entry(g, i)
		if err != nil || ok != (i >= 7) {
			t.Fatalf("Entry(%d): ok=%v err=%v", i, ok, err)
		}
	}
	if es, _ := s.Entries(g, 1, 10, 0); es != nil {
		t.Fatalf("Entries below LogStart = %+v", es)
	}
	if err := s.TruncateLog(g, 3); err != nil { // behind LogStart: a no-op
		t.Fatal(err)
	}
	if st, _ := s.LoadGroup(g); st.LogStart != 7 {
		t.Fatalf("LogStart went back to %d", st.LogStart)
	}
}

// storeFillSM writes n pseudo-random pairs into group g's keyspace and returns
// them.
func storeFillSM(t testing.TB, s *Store, g paxos.GroupID, n int, seed uint64) map[string]string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	want := map[string]string{}
	b := s.NewBatch()
	defer b.Close()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("key/%06d/%d", i, r.IntN(1000))
		v := string(bytes.Repeat([]byte{byte('a' + i%26)}, r.IntN(300)))
		b.SM(g).Set([]byte(k), []byte(v))
		want[k] = v
	}
	// One pair bigger than a chunk gets a chunk of its own.
	big := string(bytes.Repeat([]byte("B"), 5000))
	b.SM(g).Set([]byte("big"), []byte(big))
	want["big"] = big
	storeMustCommit(t, b, false)
	return want
}

func TestStoreSnapshotTransfer(t *testing.T) {
	src := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer src.Close()
	dst := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer dst.Close()
	const g = paxos.GroupID(6)
	want := storeFillSM(t, src, g, 2000, 1)
	b := src.NewBatch()
	b.SetApplied(g, 500)
	storeMustCommit(t, b, true)

	// The destination has its own stale state: SM keys that must vanish,
	// log entries below and above the snapshot, a promise to keep.
	db := dst.NewBatch()
	defer db.Close()
	db.SM(g).Set([]byte("stale"), []byte("x"))
	db.SM(g).Set([]byte("key/000001/1"), []byte("old"))
	for _, i := range []uint64{3, 499, 500, 501, 502} {
		e := storeTestEntry(i)
		db.PutEntry(g, &e)
	}
	db.SetHardState(g, paxos.HardState{Promised: paxos.Ballot{Round: 9, Node: 1}, Committed: 3})
	db.SetApplied(g, 3)
	db.SM(g+1).Set([]byte("neighbour"), []byte("y"))
	storeMustCommit(t, db, true)

	ss, err := src.OpenSnapshot(g, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	// Writes after the snapshot was opened must not leak into it.
	b.SM(g).Set([]byte("after"), []byte("x"))
	b.SetApplied(g, 600)
	storeMustCommit(t, b, false)
	b.Close()
	if ss.Applied() != 500 {
		t.Fatalf("snapshot Applied = %d", ss.Applied())
	}

	in, err := dst.BeginInstall(g)
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for {
		chunk, last, err := ss.Next()
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk) > 1024 && !bytes.Contains(chunk, []byte("BBBB")) {
			t.Fatalf("chunk of %d bytes exceeds the chunk size", len(chunk))
		}
		chunks++
		if err := in.AddChunk(chunk); err != nil {
			t.Fatal(err)
		}
		if last {
			break
		}
	}
	if chunk, last, err := ss.Next(); chunk != nil || !last || err != nil {
		t.Fatalf("Next after last = %d bytes, %v, %v", len(chunk), last, err)
	}
	if chunks < 100 {
		t.Fatalf("only %d chunks", chunks)
	}
	if err := in.Finish(ss.Applied()); err != nil {
		t.Fatal(err)
	}
	if err := in.Abort(); err != nil {
		t.Fatal("Abort after Finish:", err)
	}
	if got := storeSMContents(t, dst, g); !reflect.DeepEqual(got, want) {
		t.Fatalf("installed SM differs: %d keys, want %d", len(got), len(want))
	}
	if got := storeSMContents(t, dst, g+1); !reflect.DeepEqual(got, map[string]string{"neighbour": "y"}) {
		t.Fatalf("neighbouring group's SM touched: %v", got)
	}
	st, err := dst.LoadGroup(g)
	if err != nil {
		t.Fatal(err)
	}
	wantSt := paxos.GroupState{Hard: paxos.HardState{Promised: paxos.Ballot{Round: 9, Node: 1}, Committed: 500}, LogStart: 501, Last: 502, Applied: 500}
	if st != wantSt {
		t.Fatalf("after install %+v, want %+v", st, wantSt)
	}
	if _, ok, _ := dst.Entry(g, 500); ok {
		t.Fatal("entry 500 survived the install")
	}

	// An empty keyspace streams as one empty, last chunk.
	es, err := src.OpenSnapshot(77, 1024)
	if err != nil {
		t.Fatal(err)
	}
	chunk, last, err := es.Next()
	if len(chunk) != 0 || !last || err != nil || es.Applied() != 0 {
		t.Fatalf("empty snapshot: %d bytes, %v, %v", len(chunk), last, err)
	}
	if err := es.Close(); err != nil {
		t.Fatal(err)
	}
	if err := es.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestStoreAddChunkCorrupt(t *testing.T) {
	s := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer s.Close()
	const g = paxos.GroupID(1)
	in, err := s.BeginInstall(g)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Abort() }() // clean-up: the test checks the install's own errors
	good := []byte("\x01a\x01b")
	for _, bad := range [][]byte{
		append(append([]byte(nil), good...), 5, 'x'),           // key length beyond the chunk
		append(append([]byte(nil), good...), 1, 'k'),           // missing value
		append(append([]byte(nil), good...), 1, 'k', 2, 'v'),   // value too short
		append(append([]byte(nil), good...), 0xff, 0xff, 0xff), // truncated varint
	} {
		if err := in.AddChunk(bad); !errors.Is(err, paxos.ErrCorrupt) {
			t.Fatalf("AddChunk(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
	if got := storeSMContents(t, s, g); len(got) != 0 {
		t.Fatalf("malformed chunks wrote %v", got)
	}
	if err := in.AddChunk(good); err != nil {
		t.Fatal(err)
	}
	if got := storeSMContents(t, s, g); !reflect.DeepEqual(got, map[string]string{"a": "b"}) {
		t.Fatalf("SM = %v", got)
	}
}

func TestStoreInterruptedInstall(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := storeTestOptions()
	opts.FS = fs
	s := openStoreForTest(t, "db", opts)
	const g = paxos.GroupID(2)
	storeFillSM(t, s, g, 10, 2)
	b := s.NewBatch()
	b.SetApplied(g, 40)
	storeMustCommit(t, b, true)
	b.Close()

	in, err := s.BeginInstall(g)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.AddChunk([]byte("\x01a\x01b")); err != nil {
		t.Fatal(err)
	}
	// Power fails here: the Restoring mark was synced, the chunk need not be.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := in.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.FS = crashed
	s = openStoreForTest(t, "db", opts)
	defer s.Close()
	st, err := s.LoadGroup(g)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Restoring || st.Applied != 40 {
		t.Fatalf("after interrupted install %+v, want Restoring", st)
	}
	if _, err := s.OpenSnapshot(g, 100); err == nil {
		t.Fatal("OpenSnapshot of a restoring group succeeded")
	}
	if err := s.TruncateLog(g, 2); err == nil {
		t.Fatal("TruncateLog of a restoring group succeeded")
	}
	in, err = s.BeginInstall(g)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.AddChunk([]byte("\x01c\x01d")); err != nil {
		t.Fatal(err)
	}
	if err := in.Finish(50); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.LoadGroup(g); st.Restoring || st.Applied != 50 {
		t.Fatalf("after finished install %+v", st)
	}
	if got := storeSMContents(t, s, g); !reflect.DeepEqual(got, map[string]string{"c": "d"}) {
		t.Fatalf("SM = %v", got)
	}
}

// TestStoreCrashDurability simulates power loss after Sync commits: a
// promise, an accepted entry and a NoSync write followed by a Sync barrier
// all survive, whatever part of the unsynced data the crash keeps.
func TestStoreCrashDurability(t *testing.T) {
	for seed := uint64(0); seed < 8; seed++ {
		fs := vfs.NewCrashableMem()
		opts := storeTestOptions()
		opts.FS = fs
		s := openStoreForTest(t, "node", opts)
		const g = paxos.GroupID(9)
		b := s.NewBatch()
		var entries []paxos.Entry
		for i := uint64(1); i <= 20; i++ {
			hs := paxos.HardState{Promised: paxos.Ballot{Round: i, Node: 2}, Committed: i - 1}
			e := storeTestEntry(i, fmt.Sprint("cmd", i))
			b.SetHardState(g, hs)
			b.PutEntry(g, &e)
			storeMustCommit(t, b, true)
			entries = append(entries, e)
		}
		b.SM(g).Set([]byte("applied-state"), []byte("v"))
		b.SetApplied(g, 19)
		storeMustCommit(t, b, false)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		// Unsynced writes after the last sync may or may not survive.
		b.SM(g).Set([]byte("unsynced"), []byte("v"))
		storeMustCommit(t, b, false)
		b.Close()

		s, _ = storeCrashReopen(t, fs, s, opts, seed, 12)
		st, err := s.LoadGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		want := paxos.GroupState{Hard: paxos.HardState{Promised: paxos.Ballot{Round: 20, Node: 2}, Committed: 19}, LogStart: 1, Last: 20, Applied: 19}
		if st != want {
			t.Fatalf("seed %d: after crash %+v, want %+v", seed, st, want)
		}
		got, err := s.Entries(g, 1, 20, 0)
		if err != nil || !reflect.DeepEqual(got, entries) {
			t.Fatalf("seed %d: entries after crash: %d, %v", seed, len(got), err)
		}
		if v, ok, _ := s.SMReader(g).Get([]byte("applied-state")); !ok || string(v) != "v" {
			t.Fatalf("seed %d: write before the Sync barrier lost", seed)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// storeCrashReopen takes a crash image of fs, the filesystem of store s
// in "node": all that was synced, and with seed > 0 a random seed×pct
// percent of what was not. It closes s and returns the store opened on
// the image, and the image.
func storeCrashReopen(t testing.TB, fs *vfs.MemFS, s *Store, opts Options, seed uint64, pct int) (*Store, *vfs.MemFS) {
	t.Helper()
	cfg := vfs.CrashCloneCfg{}
	if seed > 0 {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: int(seed) * pct, RNG: rand.New(rand.NewPCG(seed, 1))}
	}
	crashed := fs.CrashClone(cfg)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.FS = crashed
	return openStoreForTest(t, "node", opts), crashed
}

func TestStoreConcurrentGroups(t *testing.T) {
	s := openStoreForTest(t, t.TempDir(), storeTestOptions())
	defer s.Close()
	var wg sync.WaitGroup
	for g := paxos.GroupID(0); g < 15; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := s.NewBatch()
			defer b.Close()
			for i := uint64(1); i <= 30; i++ {
				e := storeTestEntry(i, fmt.Sprint(g))
				b.PutEntry(g, &e)
				b.SetHardState(g, paxos.HardState{Promised: paxos.Ballot{Round: i, Node: 1}})
				if err := b.Commit(true); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for g := paxos.GroupID(0); g < 15; g++ {
		st, err := s.LoadGroup(g)
		if err != nil || st.Last != 30 || st.Hard.Promised.Round != 30 {
			t.Fatalf("group %d: %+v %v", g, st, err)
		}
	}
}

// BenchmarkStoreSyncCommit measures Sync commits of one 64-byte entry each
// from 15 goroutines (one per group), which share fsyncs.
func BenchmarkStoreSyncCommit(b *testing.B) {
	s := openStoreForTest(b, b.TempDir(), Options{Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	const writers = 15
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(g paxos.GroupID) {
			defer wg.Done()
			bt := s.NewBatch()
			defer bt.Close()
			e := paxos.Entry{Ballot: paxos.Ballot{Round: 1, Node: 1}, Value: paxos.Value{Cmds: [][]byte{make([]byte, 64)}}}
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				e.Instance = uint64(i)
				binary.BigEndian.PutUint64(e.Value.Cmds[0], uint64(i))
				bt.PutEntry(g, &e)
				if err := bt.Commit(true); err != nil {
					b.Error(err)
					return
				}
			}
		}(paxos.GroupID(w))
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
}
