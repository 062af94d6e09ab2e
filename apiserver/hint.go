package apiserver

import (
	"context"
	"strconv"

	"github.com/paxlock/paxlock/client/wire"
)

// Routing hints. Every answer about a key says which node answered and
// which node masters the key's group in that node's latest view, so that
// a client that knows every node's API address may send its next call
// for the key (or any key of the group) straight to the master and save
// the relay hop. A hint is only a hint: a call that reaches any node is
// served, a stale one costs one relay, and correctness never depends on
// it (docs/api.md, Routing).
const (
	// NodeHeader is the id of the node that answered.
	NodeHeader = "Paxlock-Node"
	// MasterHeader is the id of the master of the key's group; absent
	// when the node knows of none.
	MasterHeader = "Paxlock-Master"
	// GroupHeader is "group/groups": the key's group, wire.GroupOf of
	// wire.KeyHash(namespace, key), and the group count, for a client
	// that hashes keys it has not called yet.
	GroupHeader = "Paxlock-Group"
)

// NodeIdentity is what a Node may tell of itself for the routing hints;
// without it answers carry no hints.
type NodeIdentity interface {
	// NodeID is the node's id, as the view names it.
	NodeID() uint32
}

// hint is the master of key's group in the latest view, the group and
// the group count; ok is false before the first view or when the group
// has no master.
func (ss *nsSession) hint(key string) (master uint32, group, groups int, ok bool) {
	p := ss.masters.Load()
	if p == nil || len(*p) == 0 {
		return 0, 0, 0, false
	}
	masters := *p
	groups = len(masters)
	group = wire.GroupOf(wire.KeyHash(ss.ns, key), groups)
	master = masters[group]
	return master, group, groups, master != 0
}

// setHint writes the routing hints for key into the answer of ctx's call
// (its response headers, which the Connect handler sends with the answer
// or the error).
func (s *Service) setHint(ctx context.Context, ss *nsSession, key string) {
	c, _ := ctx.Value(callerKey{}).(caller)
	if c.w == nil || s.nodeID == "" {
		return
	}
	master, group, groups, ok := ss.hint(key)
	h := c.w.Header()
	h[NodeHeader] = []string{s.nodeID}
	if !ok {
		return
	}
	var buf [24]byte
	h[MasterHeader] = []string{string(strconv.AppendUint(buf[:0], uint64(master), 10))}
	b := strconv.AppendInt(buf[:0], int64(group), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(groups), 10)
	h[GroupHeader] = []string{string(b)}
}

// withoutHints is ctx whose calls write no routing hints: a call that
// spans every group (WatchPrefix) has no key's master to name, and its
// parts, which register from goroutines of their own, must not write the
// caller's headers.
func withoutHints(ctx context.Context) context.Context {
	c, ok := ctx.Value(callerKey{}).(caller)
	if !ok || c.w == nil {
		return ctx
	}
	c.w = nil
	return context.WithValue(ctx, callerKey{}, c)
}

// nodeIDOf is node's id as a header value, "" when it does not say.
func nodeIDOf(node Node) string {
	if n, ok := node.(NodeIdentity); ok && n.NodeID() != 0 {
		return strconv.FormatUint(uint64(n.NodeID()), 10)
	}
	return ""
}
