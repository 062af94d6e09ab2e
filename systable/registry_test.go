package systable

import (
	"errors"
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// TestRegistryTable: the tables' ops give their own outcomes, raise the
// version only when applied, write only the tables' keys, refuse a full
// table's new entry, and a load of what they wrote gives the same tables.
func TestRegistryTable(t *testing.T) {
	t.Parallel()
	var tab Registry
	changes := 0
	tab.SetObserver(func() { changes++ })
	w := mapWriter{}
	v, err := scramauth.NewVerifier("s")
	if err != nil {
		t.Fatal(err)
	}
	a := adminapi.RegistryCluster{Name: "a", Client: []string{"a:1"}}
	b := adminapi.RegistryCluster{Name: "b", Client: []string{"b:1"}, Admin: []string{"b:2"}, CA: "pem"}
	mv := adminapi.RegistryMove{Namespace: "app", ID: 1, From: "a", To: "b", State: adminapi.MovePrepare, Token: 3}
	steps := []struct {
		got, want RegistryOutcome
	}{
		{tab.ApplyCluster("a", EncodeRegistryCluster(a), w), RegistryApplied},
		{tab.ApplyCluster("b", EncodeRegistryCluster(b), w), RegistryApplied},
		{tab.ApplyNamespace("app", EncodeRegistryNamespace("a", nil), w), RegistryBadRecord}, // new: needs a verifier
		{tab.ApplyNamespace("app", EncodeRegistryNamespace("zz", &v), w), RegistryUnknown},
		{tab.ApplyNamespace("app", EncodeRegistryNamespace("a", &v), w), RegistryApplied},
		{tab.ApplyCluster("a", nil, w), RegistryInUse},
		{tab.ApplyMove("app", 3, EncodeRegistryMove(mv), w), RegistryApplied},
		{tab.ApplyMove("app", 2, nil, w), RegistryStaleToken},
		{tab.ApplyMove("app", 3, nil, w), RegistryConflict}, // unfinished
		{tab.ApplyCluster("nope", nil, w), RegistryUnknown},
	}
	for i, s := range steps {
		if s.got != s.want {
			t.Errorf("step %d: %s, want %s", i, s.got, s.want)
		}
	}
	if tab.Version() != 4 || changes != 4 {
		t.Fatalf("version %d, %d changes told; want 4 and 4", tab.Version(), changes)
	}
	if err := tab.Room(RegistryClusters, "c", RegistryLimits{MaxClusters: 2}); !errors.Is(err, ErrRegistryFull) {
		t.Fatalf("a third cluster over a limit of 2: %v", err)
	}
	if err := tab.Room(RegistryClusters, "a", RegistryLimits{MaxClusters: 2}); err != nil {
		t.Fatalf("a change of an existing cluster: %v", err)
	}
	want := tab.Tables()
	var loaded Registry
	end := loaded.BeginLoad()
	for k, v := range w {
		if !IsRegistryKey([]byte(k)) {
			t.Fatalf("key %q is not the tables'", k)
		}
		if err := CheckRegistryPair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
		if err := loaded.LoadPair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	end()
	if got := loaded.Tables(); !reflect.DeepEqual(got, want) || !loaded.HasNamespace("app") {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
	if CheckRegistryMove(adminapi.RegistryMove{Namespace: "app", ID: 1, From: "a", To: "a", State: adminapi.MovePrepare}) == nil {
		t.Fatal("a move onto its own cluster checked")
	}
	for o, e := range map[RegistryOutcome]error{RegistryUnknown: ErrRegistryUnknown, RegistryInUse: ErrRegistryInUse,
		RegistryStaleToken: ErrStaleMoveToken, RegistryConflict: ErrRegistryMoveConflict, RegistryBadRecord: wire.ErrInvalid} {
		if !errors.Is(o.Err(), e) {
			t.Errorf("%s: %v, want %v", o, o.Err(), e)
		}
	}
	if RegistryApplied.Err() != nil {
		t.Fatal("applied is an error")
	}
}
