package apiserver

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/paxlock/paxlock/wire"
)

// Lanes. A namespace's calls on a node go over one session into the node
// per master: a call about a key takes the session of the node that
// masters the key's group in the node's own view (the view the node
// forwards by), so each session carries at most one of the node's relays
// in steady state. A broken relay closes the client connection it serves
// (the master forgot the waits and watches registered through it), which
// then costs only the calls, waits and watches of the keys that relay
// served; the namespace's calls about keys of other masters, this node's
// own included, and their blocked acquires keep their sessions and their
// queue places. Each lane also has its own max_inflight and waits per
// connection on the node, so the API's callers of one namespace share
// them per master, not per node. A master change moves no session: a key
// whose group changed master goes on over its old lane (the node relays
// it) until that lane's session ends, and new calls take the new
// master's lane.

// laneKey names one session into the node: namespace ns's, for the keys
// whose group master masters (0: the node told no view).
type laneKey struct {
	ns     string
	master uint32
}

// NodeView is what a Node may tell of its view; without it a
// namespace's calls share one session into the node.
type NodeView interface {
	// View is the node's latest view of the cluster, nil before the
	// first.
	View() *wire.View
}

// laneOf is the lane of namespace ns's calls about key: the master of
// the key's group in the node's view, 0 without one.
func (s *Service) laneOf(ns, key string) laneKey {
	nv, ok := s.node.(NodeView)
	if !ok {
		return laneKey{ns: ns}
	}
	v := nv.View()
	if v == nil || len(v.Groups) == 0 {
		return laneKey{ns: ns}
	}
	g := wire.GroupOf(wire.KeyHash(ns, key), len(v.Groups))
	return laneKey{ns: ns, master: v.Groups[g].Master}
}

// sessionLost reports whether err answered a call whose session into
// the node ended under it.
func sessionLost(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable && errors.Is(err, errSessionLost)
}

// readOnly sends read request m about key over a session of its lane,
// sending it once more over a fresh session when the first ended under
// it (a broken relay): a read is safe to repeat, so its caller never
// sees that break. It returns the session that answered.
func (s *Service) readOnly(ctx context.Context, key string, typ wire.Type, m wire.Routed) (*wire.Response, *nsSession, error) {
	for try := 0; ; try++ {
		ss, err := s.open(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.routed(ctx, ss, typ, m)
		if err != nil && try == 0 && sessionLost(err) {
			continue
		}
		return r, ss, err
	}
}
