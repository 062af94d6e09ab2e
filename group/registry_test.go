package group

import (
	"errors"
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/systable"
)

// The registry's outcomes, by short names.
type regOutcome = systable.RegistryOutcome

const (
	regApplied    = systable.RegistryApplied
	regBadRecord  = systable.RegistryBadRecord
	regUnknown    = systable.RegistryUnknown
	regInUse      = systable.RegistryInUse
	regStaleToken = systable.RegistryStaleToken
	regConflict   = systable.RegistryConflict
)

// regCmds builds registry commands for the tests.
type regCmds struct{}

func (regCmds) cluster(name string, client ...string) []byte {
	return appendCommand(nil, &command{op: opRegCluster, key: name, data: systable.EncodeRegistryCluster(adminapi.RegistryCluster{Name: name, Client: client})})
}

func (regCmds) dropCluster(name string) []byte {
	return appendCommand(nil, &command{op: opRegCluster, key: name})
}

func (r regCmds) ns(name, cluster string, v *scramauth.Verifier) []byte {
	return appendCommand(nil, &command{op: opRegNamespace, key: name, data: systable.EncodeRegistryNamespace(cluster, v)})
}

func (regCmds) dropNS(name string) []byte {
	return appendCommand(nil, &command{op: opRegNamespace, key: name})
}

func (regCmds) move(m adminapi.RegistryMove) []byte {
	return appendCommand(nil, &command{op: opRegMove, key: m.Namespace, token: m.Token, data: systable.EncodeRegistryMove(m)})
}

func (regCmds) dropMove(ns string, token uint64) []byte {
	return appendCommand(nil, &command{op: opRegMove, key: ns, token: token})
}

func regService(sm *StateMachine) *Service {
	svc := &Service{}
	svc.groups = []*Group{{svc: svc, sm: sm}}
	return svc
}

// applyReg applies cmds one instance each and checks each outcome.
func applyReg(t *testing.T, sm *StateMachine, kv *memKV, from uint64, cmds [][]byte, want []regOutcome) {
	t.Helper()
	for i, c := range cmds {
		res := make([]any, 1)
		sm.Apply(from+uint64(i), [][]byte{c}, kv, res)
		if o, _ := res[0].(regOutcome); o != want[i] {
			t.Errorf("command %d: %+v, want status %v", i, res[0], want[i])
		}
	}
}

// TestRegistryTablesOps applies cluster and namespace changes (refused
// ones included), checks the tables, the epochs and the version, and
// reloads them from what was written, as a restart or a snapshot does.
func TestRegistryTablesOps(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	sm := NewStateMachine(1)
	changes := 0
	sm.reg.SetObserver(func() { changes++ })
	v1, err := scramauth.NewVerifier("secret-one")
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := scramauth.NewVerifier("secret-two")
	var r regCmds
	cmds := [][]byte{
		r.cluster("east", "e1:1", "e2:1"),
		r.cluster("west", "w1:1"),
		r.ns("app", "nowhere", &v1),   // unknown cluster
		r.ns("app", "east", nil),      // new: needs a verifier
		r.ns("app", "east", &v1),      // epoch 1
		r.ns("app", "east", &v2),      // new secret, same epoch
		r.ns("app", "west", nil),      // moved by hand: epoch 2, verifier kept
		r.dropCluster("west"),         // in use
		r.ns("tmp", "west", &v1),      // another
		r.dropNS("tmp"),               // removed
		r.dropNS("tmp"),               // gone already
		r.dropCluster("east"),         // free now
		r.cluster("bad name!", "x:1"), // malformed
		appendCommand(nil, &command{op: opRegCluster, key: "c", data: []byte{9}}),
	}
	want := []regOutcome{regApplied, regApplied, regUnknown, regBadRecord, regApplied, regApplied, regApplied,
		regInUse, regApplied, regApplied, regUnknown, regApplied, regBadRecord, regBadRecord}
	applyReg(t, sm, kv, 1, cmds, want)
	const applied = 8
	if changes != applied {
		t.Errorf("observer told of %d changes, want %d", changes, applied)
	}
	wantTables := RegistryTables{
		Version:  applied,
		Clusters: []adminapi.RegistryCluster{{Name: "west", Client: []string{"w1:1"}}},
		Namespaces: []RegistryNamespace{{
			RegistryNamespace: adminapi.RegistryNamespace{Name: "app", Cluster: "west", Epoch: 2},
			Verifier:          v2,
		}},
	}
	got := regService(sm).RegistryTables()
	if !reflect.DeepEqual(got, wantTables) {
		t.Fatalf("tables\n%+v\nwant\n%+v", got, wantTables)
	}

	loaded := NewStateMachine(1)
	told := 0
	loaded.reg.SetObserver(func() { told++ })
	if err := loaded.Load(kv, uint64(len(cmds))); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := regService(loaded).RegistryTables(); !reflect.DeepEqual(got, wantTables) || told != 1 {
		t.Fatalf("loaded tables (%d changes told)\n%+v\nwant\n%+v", told, got, wantTables)
	}
}

// TestRegistryMoves checks the moves table's fencing and its rules: a
// lower token is refused, a second move of a namespace waits for the
// first, a step of an unknown move is refused, the flip assigns the
// namespace to the target with its epoch raised, and a flipped move
// neither aborts nor goes back.
func TestRegistryMoves(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	sm := NewStateMachine(1)
	v, _ := scramauth.NewVerifier("s")
	var r regCmds
	mv := func(id uint64, st adminapi.MoveState, step, token uint64) adminapi.RegistryMove {
		return adminapi.RegistryMove{Namespace: "app", ID: id, From: "a", To: "b", State: st, Step: step, Token: token}
	}
	cmds := [][]byte{
		r.cluster("a", "a:1"), r.cluster("b", "b:1"), r.ns("app", "a", &v),
		r.move(mv(7, adminapi.MoveFreeze, 0, 10)),  // no such move yet
		r.move(mv(7, adminapi.MovePrepare, 0, 10)), // starts
		r.move(mv(8, adminapi.MovePrepare, 0, 11)), // another move: the first is unfinished
		r.move(mv(7, adminapi.MoveCopy, 3, 9)),     // stale token
		r.move(mv(7, adminapi.MoveCopy, 3, 12)),    // token raised
		r.ns("app", "b", nil),                      // moving: by its move only
		r.dropNS("app"),                            // moving
		r.dropCluster("b"),                         // a move names it
		r.dropMove("app", 12),                      // unfinished
		r.move(mv(7, adminapi.MoveFlip, 0, 12)),    // flips the assignment
		r.move(mv(7, adminapi.MoveFlip, 0, 12)),    // repeated: no second flip
		r.move(mv(7, adminapi.MoveAborted, 0, 12)), // too late
		r.move(mv(7, adminapi.MoveCopy, 0, 12)),    // no going back
		r.move(mv(7, adminapi.MoveDone, 0, 12)),
		r.dropMove("app", 11), // stale
		r.dropMove("app", 12),
	}
	want := []regOutcome{regApplied, regApplied, regApplied,
		regUnknown, regApplied, regConflict, regStaleToken, regApplied,
		regConflict, regConflict, regInUse, regConflict,
		regApplied, regApplied, regConflict, regConflict, regApplied, regStaleToken, regApplied}
	applyReg(t, sm, kv, 1, cmds, want)
	got := regService(sm).RegistryTables()
	if len(got.Namespaces) != 1 || got.Namespaces[0].Cluster != "b" || got.Namespaces[0].Epoch != 2 || len(got.Moves) != 0 {
		t.Fatalf("after the move: %+v", got)
	}

	// Mid-move state survives a reload, token and all.
	kv2 := newMemKV()
	sm2 := NewStateMachine(1)
	applyReg(t, sm2, kv2, 1, [][]byte{r.cluster("a", "a:1"), r.cluster("b", "b:1"), r.ns("app", "a", &v),
		r.move(mv(3, adminapi.MovePrepare, 0, 5)), r.move(mv(3, adminapi.MoveCopy, 2, 6))},
		[]regOutcome{regApplied, regApplied, regApplied, regApplied, regApplied})
	loaded := NewStateMachine(1)
	if err := loaded.Load(kv2, 5); err != nil {
		t.Fatal(err)
	}
	lt := regService(loaded).RegistryTables()
	if len(lt.Moves) != 1 || lt.Moves[0] != mv(3, adminapi.MoveCopy, 2, 6) || lt.Version != 5 {
		t.Fatalf("loaded moves %+v (version %d)", lt.Moves, lt.Version)
	}
	applyReg(t, loaded, kv2, 6, [][]byte{r.move(mv(3, adminapi.MoveCopy, 3, 5)), r.move(mv(3, adminapi.MoveAborted, 0, 6))},
		[]regOutcome{regStaleToken, regApplied})
	if lt := regService(loaded).RegistryTables(); lt.Namespaces[0].Cluster != "a" || lt.Namespaces[0].Epoch != 1 {
		t.Fatalf("aborted move changed the assignment: %+v", lt.Namespaces)
	}
	// An abort asked for (aborting) is never undone: the driver's flip
	// that raced with it is refused, and only aborted follows.
	kv3 := newMemKV()
	sm3 := NewStateMachine(1)
	applyReg(t, sm3, kv3, 1, [][]byte{r.cluster("a", "a:1"), r.cluster("b", "b:1"), r.ns("app", "a", &v),
		r.move(mv(4, adminapi.MovePrepare, 0, 5)), r.move(mv(4, adminapi.MoveCopy, 0, 5)),
		r.move(mv(4, adminapi.MoveAborting, 0, 5)), r.move(mv(4, adminapi.MoveFlip, 0, 5)),
		r.move(mv(4, adminapi.MoveCopy, 0, 5)), r.move(mv(4, adminapi.MoveAborted, 0, 5))},
		[]regOutcome{regApplied, regApplied, regApplied, regApplied, regApplied, regApplied, regConflict, regConflict, regApplied})
	if lt := regService(sm3).RegistryTables(); lt.Namespaces[0].Cluster != "a" || lt.Namespaces[0].Epoch != 1 {
		t.Fatalf("an aborted move changed the assignment: %+v", lt.Namespaces)
	}
}

// TestRegistryBackupPairs: a backup checks registry records, refusing a
// malformed one and keeping a good one.
func TestRegistryBackupPairs(t *testing.T) {
	t.Parallel()
	v, _ := scramauth.NewVerifier("s")
	good := systable.EncodeRegistryNamespace("a", &v)
	if err := checkPair([]byte("rnapp"), good); err != nil {
		t.Fatalf("good namespace record: %v", err)
	}
	if err := checkPair([]byte("rnapp"), good[:len(good)-1]); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("truncated namespace record: %v, want ErrBadBackup", err)
	}
	if err := checkPair([]byte("rca"), systable.EncodeRegistryCluster(adminapi.RegistryCluster{Name: "a"})); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("cluster without addresses: %v, want ErrBadBackup", err)
	}
	if err := checkPair([]byte("rv"), []byte{0x80}); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("bad version: %v, want ErrBadBackup", err)
	}
}
