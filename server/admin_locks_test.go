package server

import (
	"strings"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// TestMergeLockSources: a page is the first limit keys over the sources,
// in order, never past the least last key of a source that may have more
// (its keys beyond it are unknown), with the cursor of the next page
// exactly when there may be one.
func TestMergeLockSources(t *testing.T) {
	t.Parallel()
	src := func(more bool, keys ...string) lockSource {
		s := lockSource{more: more}
		for _, k := range keys {
			s.locks = append(s.locks, adminapi.LockSummary{Key: k})
		}
		return s
	}
	keys := func(p adminapi.LockPage) string {
		var ks []string
		for _, l := range p.Locks {
			ks = append(ks, l.Key)
		}
		return strings.Join(ks, " ")
	}
	for _, c := range []struct {
		limit      int
		srcs       []lockSource
		want, next string
	}{
		{10, []lockSource{src(false, "b", "d"), src(false, "a", "c")}, "a b c d", ""},
		{3, []lockSource{src(true, "b", "d", "f"), src(false, "a", "c")}, "a b c", "c"},
		// A source cut short (a frame's worth) at "b": "c" may come after
		// keys of it that were not sent, so the page stops at "b".
		{10, []lockSource{src(true, "a", "b"), src(false, "c", "d")}, "a b", "b"},
		{2, []lockSource{src(false, "a", "b"), src(false)}, "a b", ""},
		{2, []lockSource{src(false)}, "", ""},
	} {
		p := mergeLockSources(adminhttp.LockQuery{Namespace: "ns", Limit: c.limit}, c.srcs)
		if keys(p) != c.want || p.Next != c.next || p.Locks == nil {
			t.Errorf("limit %d: page %q next %q, want %q next %q", c.limit, keys(p), p.Next, c.want, c.next)
		}
	}
}
