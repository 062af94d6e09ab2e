package server

import (
	"reflect"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// TestMergeNamespaces: the cluster's namespace counts take held keys and
// holders from the node that counts the most (replicas behind count
// fewer) and sum the waiters (each node counts its own masters'), one
// entry per namespace, sorted.
func TestMergeNamespaces(t *testing.T) {
	t.Parallel()
	got := mergeNamespaces([]adminapi.NamespaceUse{
		{Namespace: "b", Held: 2, Holders: 5, Waiters: 1},
		{Namespace: "a", Held: 0},
		{Namespace: "b", Held: 3, Holders: 4, Waiters: 2},
		{Namespace: "a", Held: 1, Holders: 1},
	})
	want := []adminapi.NamespaceUse{{Namespace: "a", Held: 1, Holders: 1}, {Namespace: "b", Held: 3, Holders: 5, Waiters: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mergeNamespaces: %+v, want %+v", got, want)
	}
	if got := mergeNamespaces(nil); got == nil || len(got) != 0 {
		t.Errorf("no nodes: %#v, want an empty list (JSON [])", got)
	}
}
