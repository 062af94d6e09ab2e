package group

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/systable"
)

// v1SaltLen is a version-1 namespace record's salt length.
const v1SaltLen = 16

// v1Record is a namespace record as written before SCRAM: version 1, a
// salt and SHA-256(salt || secret).
func v1Record(salt byte, secret string) []byte {
	s := make([]byte, v1SaltLen)
	for i := range s {
		s[i] = salt
	}
	sum := sha256.Sum256(append(append([]byte(nil), s...), secret...))
	return append(append([]byte{1}, s...), sum[:]...)
}

// TestNamespaceRecordsOfBothVersions applies the namespace commands an
// older node wrote (version-1 records, the Init list without length
// prefixes) and a new one, reloads the table from what they wrote (as a
// restart or a snapshot does), and checks what each namespace can do: a
// version-2 record authenticates with its verifier; a version-1 one with
// the verifier derived from the configured secret (the same on every
// node), and not at all without it or with another secret.
func TestNamespaceRecordsOfBothVersions(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	sm := NewStateMachine(1)
	var initData []byte
	for _, name := range []string{"old", "oldcfg"} {
		initData = binary.AppendUvarint(initData, uint64(len(name)))
		initData = append(initData, name...)
		initData = append(initData, v1Record(byte(len(name)), "pw-"+name)...)
	}
	fresh, err := systable.NewNamespaceRecord("pw-new")
	if err != nil {
		t.Fatal(err)
	}
	cmds := [][]byte{
		appendCommand(nil, &command{op: opNamespaceInit, data: initData}),
		appendCommand(nil, &command{op: opNamespacePut, key: "oldput", data: v1Record(9, "pw-oldput")}),
		appendCommand(nil, &command{op: opNamespacePut, key: "new", data: fresh}),
		appendCommand(nil, &command{op: opNamespacePut, key: "bad", data: []byte{2, 0, 0}}),
	}
	results := make([]any, len(cmds))
	sm.Apply(1, cmds, kv, results)
	for i, r := range results[:3] {
		if o, _ := r.(systable.NamespaceOutcome); o != systable.NamespaceApplied {
			t.Fatalf("command %d: %+v", i, r)
		}
	}
	if o, _ := results[3].(systable.NamespaceOutcome); o != systable.NamespaceBadRecord {
		t.Fatalf("a malformed record was applied: %+v", results[3])
	}

	loaded := NewStateMachine(1)
	if err := loaded.Load(kv, 1); err != nil {
		t.Fatalf("Load: %v", err)
	}
	svc := &Service{}
	svc.groups = []*Group{{svc: svc, sm: loaded}}
	if got := svc.Namespaces(); len(got) != 4 {
		t.Fatalf("namespaces after Load: %v", got)
	}
	secrets := map[string]string{"oldcfg": "pw-oldcfg", "oldput": "wrong"}
	if v, ok := svc.Credentials("new", nil, secrets); !ok || v.Validate() != nil {
		t.Fatal("a version-2 record has no verifier")
	}
	v, ok := svc.Credentials("oldcfg", nil, secrets)
	want, _ := scramauth.Derive("pw-oldcfg", v1Record(6, "")[1:1+v1SaltLen], scramauth.Iterations)
	if !ok || !v.Equal(want) {
		t.Fatal("a version-1 record with its configured secret has no verifier, or not the one every node derives")
	}
	if again, _ := svc.Credentials("oldcfg", nil, secrets); !again.Equal(v) {
		t.Fatal("the derived verifier changed")
	}
	for _, ns := range []string{"old", "oldput", "missing"} {
		if _, ok := svc.Credentials(ns, nil, secrets); ok {
			t.Errorf("%s: credentials without the right configured secret", ns)
		}
	}
}
