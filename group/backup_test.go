package group

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/paxlock/paxlock/backup"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos/pebblestore"
	"github.com/paxlock/paxlock/systable"
)

// backupFixture builds two groups' state machines in a store: group 0
// with a namespace and held keys in two namespaces (values, readers),
// group 1 with a raised group version; and returns the store and the
// machines.
func backupFixture(t *testing.T) (*pebblestore.Store, []*StateMachine) {
	t.Helper()
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	sms := []*StateMachine{NewStateMachine(4), NewStateMachine(4)}
	rec, err := systable.NewNamespaceRecord("pw")
	if err != nil {
		t.Fatal(err)
	}
	o := func(n uint64) wire.Owner { return wire.Owner{Client: n, ID: n} }
	applyCommitted(t, st, ID(0).ReplicaGroup(), sms[0], 3, []command{
		{op: opNamespacePut, key: "tenant", data: rec},
		{op: opMemberInit, data: systable.AppendMember(nil, Member{ID: 1, State: MemberActive, Peer: "p1"})},
		{op: opAcquire, key: fullKey("ns", "a"), owner: o(1), kind: wire.KindExclusive, ttlMs: 60000, value: "va"},
		{op: opAcquire, key: fullKey("tenant", "b"), owner: o(2), kind: wire.KindRead, ttlMs: 60000},
	})
	applyCommitted(t, st, ID(0).ReplicaGroup(), sms[0], 5, []command{
		{op: opAcquire, key: fullKey("tenant", "b"), owner: o(3), kind: wire.KindRead, ttlMs: 30000, value: "r3"},
	})
	applyCommitted(t, st, ID(1).ReplicaGroup(), sms[1], 7, []command{
		{op: opSetVersion, token: 4},
		{op: opAcquire, key: fullKey("ns", "c"), owner: o(4), kind: wire.KindWrite, ttlMs: 1000},
	})
	return st, sms
}

func writeBackup(t *testing.T, st *pebblestore.Store, groups int) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw, err := NewBackupWriter(&buf, BackupHeader{Cluster: "c1", Time: time.Unix(1e9, 0).UTC(), Node: 2, Commit: "test", Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	for g := range groups {
		src, err := st.OpenSnapshot(ID(g).ReplicaGroup(), 64) // small chunks: several per group
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bw.Group(src, g == 0); err != nil {
			t.Fatal(err)
		}
		src.Close()
	}
	if err := bw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBackupRestoreStateMachines: a backup read back describes every
// group (instance, version, locks) and, restored into another store, loads
// the same lock and namespace tables at RestoredApplied with each group's
// version raised by one.
func TestBackupRestoreStateMachines(t *testing.T) {
	t.Parallel()
	st, sms := backupFixture(t)
	b := writeBackup(t, st, 2)
	info, err := ReadBackup(bytes.NewReader(b), BackupVisitor{})
	if err != nil {
		t.Fatal(err)
	}
	want := []BackupGroup{
		{Group: 0, Applied: 5, Master: true, Version: 0, Locks: 2, Pairs: 4}, // 2 locks, a namespace, nsinit
		{Group: 1, Applied: 7, Version: 4, Locks: 1, Pairs: 2},
	}
	if !reflect.DeepEqual(info.Groups, want) || info.Header.Cluster != "c1" || info.Header.Format != BackupFormat {
		t.Fatalf("backup info %+v, want groups %+v", info, want)
	}

	dst := openStore(t, t.TempDir())
	defer dst.Close()
	if _, err := RestoreBackup(bytes.NewReader(b), dst); err != nil {
		t.Fatal(err)
	}
	for g, sm := range sms {
		gs, err := dst.LoadGroup(ID(g).ReplicaGroup())
		if err != nil {
			t.Fatal(err)
		}
		if gs.Applied != RestoredApplied || gs.LogStart != RestoredApplied+1 || gs.Restoring {
			t.Fatalf("group %d restored as %+v", g, gs)
		}
		got := NewStateMachine(4)
		if err := got.Load(dst.SMReader(ID(g).ReplicaGroup()), gs.Applied); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dumpSM(got), dumpSM(sm)) {
			t.Fatalf("group %d restored:\n%v\nwant\n%v", g, dumpSM(got), dumpSM(sm))
		}
		if got.Version() != sm.Version()+1 {
			t.Fatalf("group %d: version %d restored, want %d", g, got.Version(), sm.Version()+1)
		}
		if !reflect.DeepEqual(got.HeldByNamespace(), sm.HeldByNamespace()) {
			t.Fatalf("group %d: held per namespace %v, want %v", g, got.HeldByNamespace(), sm.HeldByNamespace())
		}
		// A new grant's token exceeds every token of the backup.
		var maxOld uint64
		for _, l := range dumpSM(sm) {
			for _, h := range l.holds {
				maxOld = max(maxOld, h.token)
			}
		}
		res := make([]any, 1)
		cmd := appendCommand(nil, &command{op: opAcquire, key: fullKey("ns", "new"), owner: wire.Owner{Client: 9, ID: 9}, kind: wire.KindExclusive, ttlMs: 1000})
		b := dst.NewBatch()
		got.Apply(RestoredApplied+1, [][]byte{cmd}, b.SM(ID(g).ReplicaGroup()), res)
		b.Close()
		if tok := res[0].(*outcome).token; tok <= maxOld {
			t.Fatalf("group %d: token %#x after restore, backup's highest %#x", g, tok, maxOld)
		}
	}
	if !sms[0].ns.Has("tenant") {
		t.Fatal("fixture lacks its namespace")
	}
	got := NewStateMachine(4)
	if err := got.Load(dst.SMReader(ID(0).ReplicaGroup()), RestoredApplied); err != nil {
		t.Fatal(err)
	}
	if !got.ns.Has("tenant") || !got.ns.Initialised() {
		t.Fatalf("namespace table not restored: %v init %v", got.ns.Names(), got.ns.Initialised())
	}
	// The old cluster's member list stays behind: the new cluster seeds
	// its own from its configuration.
	if sms[0].members.Len() != 1 || got.members.Len() != 0 || got.members.Initialised() {
		t.Fatalf("member list: backed up %d records, restored %d (init %v), want none restored", sms[0].members.Len(), got.members.Len(), got.members.Initialised())
	}
}

// TestReadBackupRefusesDamage: every single-byte change, and every
// truncation, of a backup is refused with ErrBadBackup.
func TestReadBackupRefusesDamage(t *testing.T) {
	t.Parallel()
	st, _ := backupFixture(t)
	b := writeBackup(t, st, 2)
	step := max(1, len(b)/300)
	for i := 0; i < len(b); i += step {
		bad := bytes.Clone(b)
		bad[i] ^= 0x01
		if _, err := ReadBackup(bytes.NewReader(bad), BackupVisitor{}); !errors.Is(err, ErrBadBackup) {
			t.Fatalf("byte %d of %d flipped: %v, want ErrBadBackup", i, len(b), err)
		}
		if _, err := ReadBackup(bytes.NewReader(b[:i]), BackupVisitor{}); !errors.Is(err, ErrBadBackup) {
			t.Fatalf("truncated to %d of %d: %v, want ErrBadBackup", i, len(b), err)
		}
	}
	if _, err := ReadBackup(bytes.NewReader(append(bytes.Clone(b), 0)), BackupVisitor{}); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("a byte after the checksum: %v, want ErrBadBackup", err)
	}
	// A bad file restores nothing that loads: the group it broke in stays
	// marked restoring.
	bad := bytes.Clone(b)
	bad[len(bad)-5] ^= 0x01 // in the checksum
	dst := openStore(t, t.TempDir())
	defer dst.Close()
	if _, err := RestoreBackup(bytes.NewReader(bad), dst); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("restore of a bad file: %v", err)
	}
}

// TestHeldByNamespace: the per-namespace counts follow grants, releases
// and expiries, and drop a namespace with nothing held.
func TestHeldByNamespace(t *testing.T) {
	t.Parallel()
	sm := NewStateMachine(2)
	apply := func(inst uint64, c command) *outcome {
		res := make([]any, 1)
		sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, discard{}, res)
		return res[0].(*outcome)
	}
	o := wire.Owner{Client: 1, ID: 1}
	var toks []uint64
	for i := range 5 {
		ns := "a"
		if i >= 3 {
			ns = "b"
		}
		toks = append(toks, apply(uint64(i+1), command{op: opAcquire, key: fullKey(ns, fmt.Sprint(i)), owner: o, kind: wire.KindExclusive, ttlMs: 1000}).token)
	}
	if got := sm.HeldByNamespace(); !reflect.DeepEqual(got, map[string]int64{"a": 3, "b": 2}) {
		t.Fatalf("held %v", got)
	}
	apply(10, command{op: opRelease, key: fullKey("b", "3"), owner: o, token: toks[3]})
	apply(11, command{op: opExpire, key: fullKey("b", "4"), owner: o, token: toks[4]})
	apply(12, command{op: opRelease, key: fullKey("a", "0"), owner: o, token: toks[0]})
	if got := sm.HeldByNamespace(); !reflect.DeepEqual(got, map[string]int64{"a": 2}) {
		t.Fatalf("held %v after releases", got)
	}
}

// discard is a paxos.Writer that keeps nothing.
type discard struct{}

func (discard) Set(k, v []byte) {}
func (discard) Delete(k []byte) {}

// BenchmarkBackupStream writes a backup of one group holding
// PAXLOCK_BACKUP_LOCKS held keys (default 100,000) with 16-byte values
// from its Pebble image to io.Discard, and reports the image's bytes per
// lock and the heap in use at the end of the stream above its start
// (streaming: about a chunk, not the image).
func BenchmarkBackupStream(b *testing.B) {
	n := 100000
	if s := os.Getenv("PAXLOCK_BACKUP_LOCKS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	gid := ID(0).ReplicaGroup()
	sm := NewStateMachine(8)
	const batch = 1000
	for i := 0; i < n; i += batch {
		raw := make([][]byte, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			raw = append(raw, appendCommand(nil, &command{op: opAcquire, key: fullKey("ns", fmt.Sprintf("key/%08d", j)),
				owner: wire.Owner{Client: uint64(j), ID: 1}, kind: wire.KindExclusive, ttlMs: 60000, value: "value-0123456789"}))
		}
		bt := st.NewBatch()
		sm.Apply(uint64(i/batch+1), raw, bt.SM(gid), make([]any, len(raw)))
		sm.Checkpoint(bt.SM(gid))
		bt.SetApplied(gid, uint64(i/batch+1))
		if err := bt.Commit(false); err != nil {
			b.Fatal(err)
		}
		bt.Close()
	}
	sm = nil
	b.ResetTimer()
	var size int64
	var grow uint64
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		cw := &countingDiscard{}
		bw, err := NewBackupWriter(cw, BackupHeader{Cluster: "bench", Groups: 1})
		if err != nil {
			b.Fatal(err)
		}
		src, err := st.OpenSnapshot(gid, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		g, err := bw.Group(src, true)
		if err != nil || g.Locks != int64(n) {
			b.Fatalf("group %+v: %v", g, err)
		}
		src.Close()
		if err := bw.Close(); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		size = cw.n
		if after.HeapInuse > before.HeapInuse {
			grow = max(grow, after.HeapInuse-before.HeapInuse)
		}
	}
	b.ReportMetric(float64(size)/float64(n), "file-bytes/lock")
	b.ReportMetric(float64(size)/1e6, "file-MB")
	b.ReportMetric(float64(grow)/1e6, "heap-growth-MB")
}

type countingDiscard struct{ n int64 }

func (c *countingDiscard) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// TestBackupKeysAgree: the keys package backup counts are the state
// machine's lock-record prefix and group-version key.
func TestBackupKeysAgree(t *testing.T) {
	if backup.LockPrefix != lockPrefix || !bytes.Equal(backup.VersionKey, versionKey) {
		t.Fatalf("backup counts prefix %q and version key %q; the state machine uses %q and %q",
			backup.LockPrefix, backup.VersionKey, lockPrefix, versionKey)
	}
}
