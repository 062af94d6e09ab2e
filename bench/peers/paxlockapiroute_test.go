package peers

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// A key goes to the node its group's latest hint names; a key of a group
// without a hint, a hint naming a node the locker does not know and a
// malformed hint leave the fallback.
func TestAPIRouterPicks(t *testing.T) {
	r := &apiRouter{ns: "default", byID: map[uint32]int{}}
	hint := func(node, master string, group string) http.Header {
		h := http.Header{}
		h.Set(hintNode, node)
		h.Set(hintMaster, master)
		h.Set(hintGroup, group)
		return h
	}
	for i, id := range []string{"11", "12", "13"} {
		r.identify(i, hint(id, "", ""))
	}
	if got := r.pick("k", 1); got != 1 {
		t.Fatalf("no hints yet: %d, want the fallback 1", got)
	}
	const groups = 8
	g := wire.GroupOf(wire.KeyHash("default", "k"), groups)
	other := (g + 1) % groups
	r.learn(hint("11", "13", strconv.Itoa(g)+"/"+strconv.Itoa(groups)))
	if got := r.pick("k", 0); got != 2 {
		t.Fatalf("hinted master 13: node %d, want 2", got)
	}
	r.learn(hint("11", "99", strconv.Itoa(other)+"/8"))
	r.learn(hint("11", "12", "9/8"))
	r.learn(hint("11", "12", "x/8"))
	if got := r.pick("k", 0); got != 2 {
		t.Fatalf("after malformed and foreign hints: node %d, want 2", got)
	}
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		want := 0
		if wire.GroupOf(wire.KeyHash("default", key), groups) == g {
			want = 2
		}
		if got := r.pick(key, 0); got != want {
			t.Fatalf("key %q: node %d, want %d", key, got, want)
		}
	}
	var none *apiRouter
	if got := none.pick("k", 2); got != 2 {
		t.Fatalf("routing off: %d, want the fallback", got)
	}
}
