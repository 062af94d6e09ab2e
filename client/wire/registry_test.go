package wire

import (
	"errors"
	"reflect"
	"testing"
)

// TestRegistryTablesRoundTrip: the registry's messages decode to what was
// encoded, in both frame types that carry tables, and a list over its
// limit is ErrMalformed.
func TestRegistryTablesRoundTrip(t *testing.T) {
	t.Parallel()
	in := &RegistryTables{
		Version: 42,
		Clusters: []RegistryCluster{
			{Name: "east", Client: []string{"e1:7101", "e2:7101"}, Admin: []string{"e1:7301"}, CA: "-----BEGIN CERTIFICATE-----"},
			{Name: "west", Client: []string{"w1:7101"}},
		},
		Namespaces: []RegistryNamespace{{Name: "app", Cluster: "east", Epoch: 3, Iters: 4096, Salt: "\x00\x01salt", StoredKey: "sk", ServerKey: "vk"}},
		Moves:      []RegistryMove{{Namespace: "app", From: "east", To: "west", ID: 9, State: 3, Step: 17, Token: 1 << 50}},
	}
	for _, typ := range []Type{TypeRegistryTables, TypeRegistryChanged} {
		frame, err := AppendFrame(nil, typ, 5, in)
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := ParseFrame(frame, MaxRegistryFrame)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Decode(f.Type, f.Body)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("%s: got %+v, want %+v", typ, out, in)
		}
	}
	sub := &SubscribeRegistry{Version: 7}
	b, err := AppendBody(nil, sub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(TypeSubscribeRegistry, b)
	if err != nil || !reflect.DeepEqual(got, sub) {
		t.Fatalf("SubscribeRegistry: %+v %v", got, err)
	}
	many := &RegistryTables{Clusters: []RegistryCluster{{Name: "x", Client: make([]string, MaxRegistryAddrs+1)}}}
	b, err = AppendBody(nil, many)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(TypeRegistryTables, b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("too many addresses: %v, want ErrMalformed", err)
	}
}
