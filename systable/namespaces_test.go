package systable

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/paxlock/paxlock/client/scramauth"
)

// v1Record is a namespace record as written before SCRAM: version 1, a
// salt and SHA-256(salt || secret).
func v1Record(salt byte, secret string) []byte {
	s := make([]byte, nsSaltLen)
	for i := range s {
		s[i] = salt
	}
	sum := hashSecret(s, secret)
	return append(append([]byte{nsRecV1}, s...), sum[:]...)
}

// TestNamespacesTable: the table's ops give their own outcomes and write
// only the table's keys; a delete of an unknown namespace is refused; an
// install after the first is a no-op; every op moves the generation; and
// a load of what they wrote gives the same table.
func TestNamespacesTable(t *testing.T) {
	t.Parallel()
	var tab Namespaces
	w := mapWriter{}
	v, err := SeedVerifier("c", "seeded", "pw")
	if err != nil {
		t.Fatal(err)
	}
	seed, err := EncodeNamespaceSeed(map[string]scramauth.Verifier{"seeded": v})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := NewNamespaceRecord("pw-new")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := EncodeNamespaceSeed(map[string]scramauth.Verifier{"late": v})
	steps := []struct {
		got, want NamespaceOutcome
	}{
		{tab.ApplyInit(seed, w), NamespaceApplied},
		{tab.ApplyInit(other, w), NamespaceApplied}, // once only
		{tab.ApplyPut("new", fresh, w), NamespaceApplied},
		{tab.ApplyPut("gone", fresh, w), NamespaceApplied},
		{tab.ApplyDelete("gone", w), NamespaceApplied},
		{tab.ApplyDelete("never", w), NamespaceUnknown},
		{tab.ApplyPut("bad", []byte{2, 0, 0}, w), NamespaceBadRecord},
		{tab.ApplyPut("bad\x00name", fresh, w), NamespaceBadRecord},
	}
	for i, s := range steps {
		if s.got != s.want {
			t.Errorf("step %d: %s, want %s", i, s.got, s.want)
		}
	}
	if g := tab.Generation(); g != uint64(len(steps)) {
		t.Errorf("generation %d after %d ops", g, len(steps))
	}
	want := []string{"new", "seeded"}
	if got := tab.Names(); !slices.Equal(got, want) || len(w) != 3 || !tab.Initialised() {
		t.Fatalf("names %v, %d keys written (want %v, 3)", got, len(w), want)
	}
	var loaded Namespaces
	end := loaded.BeginLoad()
	for k, v := range w {
		if !IsNamespaceKey([]byte(k)) {
			t.Fatalf("key %q is not the table's", k)
		}
		if err := CheckNamespacePair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
		if err := loaded.LoadPair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	end()
	if got := loaded.Names(); !slices.Equal(got, want) || !loaded.Initialised() || loaded.Generation() == 0 {
		t.Fatalf("loaded %v (init %v)", got, loaded.Initialised())
	}
	if got, ok := loaded.Verifier("seeded", nil, nil); !ok || !got.Equal(v) {
		t.Fatal("the seeded verifier did not survive the load")
	}
	if err := CheckNamespacePair([]byte("nx"), []byte{2, 0}); !errors.Is(err, ErrBadNamespaceRecord) {
		t.Fatalf("a bad record checked: %v", err)
	}
	if NamespaceUnknown.Err() != ErrUnknownNamespace || NamespaceApplied.Err() != nil || NamespaceBadRecord.Err() == nil {
		t.Fatal("Err does not map the outcomes")
	}
}

// TestNamespaceRecordsOfBothVersions installs the namespaces an older
// node wrote (version-1 records, the install list without length
// prefixes) and a new one, and checks what each can do: a version-2
// record authenticates with its verifier; a version-1 one with the
// verifier derived from the configured secret (the same on every node),
// and not at all without it or with another secret. Until the table is
// initialised the seed answers.
func TestNamespaceRecordsOfBothVersions(t *testing.T) {
	t.Parallel()
	var tab Namespaces
	seedV, _ := SeedVerifier("c", "old", "pw-old")
	if got, ok := tab.Verifier("old", map[string]scramauth.Verifier{"old": seedV}, nil); !ok || !got.Equal(seedV) {
		t.Fatal("the seed does not answer before the table is initialised")
	}
	var list []byte
	for _, name := range []string{"old", "oldcfg"} {
		list = binary.AppendUvarint(list, uint64(len(name)))
		list = append(list, name...)
		list = append(list, v1Record(byte(len(name)), "pw-"+name)...)
	}
	w := mapWriter{}
	if o := tab.ApplyInit(list, w); o != NamespaceApplied {
		t.Fatalf("install of version-1 records: %s", o)
	}
	if o := tab.ApplyPut("oldput", v1Record(9, "pw-oldput"), w); o != NamespaceApplied {
		t.Fatalf("put of a version-1 record: %s", o)
	}
	fresh, _ := NewNamespaceRecord("pw-new")
	tab.ApplyPut("new", fresh, w)
	secrets := map[string]string{"oldcfg": "pw-oldcfg", "oldput": "wrong"}
	if v, ok := tab.Verifier("new", nil, secrets); !ok || v.Validate() != nil {
		t.Fatal("a version-2 record has no verifier")
	}
	v, ok := tab.Verifier("oldcfg", nil, secrets)
	want, _ := scramauth.Derive("pw-oldcfg", v1Record(6, "")[1:1+nsSaltLen], scramauth.Iterations)
	if !ok || !v.Equal(want) {
		t.Fatal("a version-1 record with its configured secret has no verifier, or not the one every node derives")
	}
	if again, _ := tab.Verifier("oldcfg", nil, secrets); !again.Equal(v) {
		t.Fatal("the derived verifier changed")
	}
	for _, ns := range []string{"old", "oldput", "missing"} {
		if _, ok := tab.Verifier(ns, nil, secrets); ok {
			t.Errorf("%s: credentials without the right configured secret", ns)
		}
	}
	if _, hasV, err := ParseNamespaceRecord(v1Record(1, "x")); err != nil || hasV {
		t.Fatalf("a version-1 record parsed with a verifier (%v) or failed: %v", hasV, err)
	}
}
