package apiserver

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/paxlock/paxlock/client/wire"
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

// Pools. A lane is a pool of sessions, not one: the node bounds each
// client connection's requests in flight (max_inflight), blocked
// acquires and watches (max_waits_per_conn, max_watches_per_conn), prefix
// watches (max_prefix_watches_per_conn, one place per group: a
// WatchPrefix stream is counted as taking one per group on one master,
// the most it can take on one connection), and
// the API's callers of a namespace would otherwise share those of one
// connection per master. A call takes the lane's first session below
// three quarters of every bound (the one it opens first stays the
// busiest, so a quiet lane keeps one session); when all are above it,
// the lane opens another, up to maxLaneSessions, each counted among the
// namespace's sessions on the node (max_conns_per_namespace). Past that
// the node's own answers (OVERLOADED: RESOURCE_EXHAUSTED) bound it.

// maxLaneSessions bounds the sessions of one lane.
const maxLaneSessions = 8

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

// NodeBounds is what a Node may tell of the bounds of one client
// connection (its configuration's max_inflight, max_waits_per_conn and
// max_watches_per_conn); without it the node's defaults are assumed.
type NodeBounds interface {
	// ConnBounds are one client connection's bounds on the node.
	ConnBounds() (maxInflight, maxWaits, maxWatches int)
}

// NodePrefixBounds is what a Node may tell of one client connection's
// bound on prefix-watch places (max_prefix_watches_per_conn); without it
// the node's default (64) is assumed.
type NodePrefixBounds interface {
	// ConnPrefixWatches is one client connection's bound on prefix-watch
	// places, one per group a prefix watch registers with.
	ConnPrefixWatches() int
}

// connBounds are the bounds of one session into the node.
type connBounds struct{ inflight, waits, watches, prefix int64 }

// boundsOf is node's connection bounds (NodeBounds, NodePrefixBounds), or
// the node's defaults.
func boundsOf(node Node) connBounds {
	b := connBounds{inflight: 4096, waits: 10000, watches: 10000, prefix: 64}
	if nb, ok := node.(NodeBounds); ok {
		i, w, x := nb.ConnBounds()
		b.inflight, b.waits, b.watches = int64(i), int64(w), int64(x)
	}
	if np, ok := node.(NodePrefixBounds); ok {
		b.prefix = int64(np.ConnPrefixWatches())
	}
	return b
}

// busy reports whether ss has reached three quarters of a bound b.
func (ss *nsSession) busy(b connBounds) bool {
	return ss.inflight.Load()*4 >= b.inflight*3 || ss.nwaits.Load()*4 >= b.waits*3 || ss.nwatches.Load()*4 >= b.watches*3 ||
		ss.nprefix.Load()*int64(ss.groupsSeen())*4 >= b.prefix*3
}

// use is what a caller of Service.open takes of its session: a call, or
// also a blocked acquire's wait or a watch, counted on the session as it
// is picked (so that callers arriving together spread over the pool),
// until the caller gives it back (nsSession.giveBack).
type use int

const (
	useCall use = iota
	useWait
	useWatch
	usePrefix // a WatchPrefix stream
)

// pickLocked returns the session of lane a call that takes u picks, and
// counts u on it, forgetting the lane's sessions that ended; nil when
// the lane should open another. s.mu is held.
func (s *Service) pickLocked(lane laneKey, u use) *nsSession {
	ss := s.sessions[lane]
	var pick *nsSession
	for i := 0; i < len(ss); {
		x := ss[i]
		select {
		case <-x.ready:
			if x.failed() {
				ss = append(ss[:i], ss[i+1:]...)
				continue
			}
		default:
		}
		if !x.busy(s.bounds) {
			pick = x
			break
		}
		if pick == nil {
			pick = x // the first, if every session is busy and the lane full
		}
		i++
	}
	s.sessions[lane] = ss
	if pick == nil || (pick.busy(s.bounds) && len(ss) < maxLaneSessions) {
		return nil
	}
	pick.take(u)
	return pick
}

// take counts u on ss.
func (ss *nsSession) take(u use) {
	switch u {
	case useWait:
		ss.nwaits.Add(1)
	case useWatch:
		ss.nwatches.Add(1)
	case usePrefix:
		ss.nprefix.Add(1)
	}
}

// giveBack uncounts u on ss, which Service.open counted.
func (ss *nsSession) giveBack(u use) {
	switch u {
	case useWait:
		ss.nwaits.Add(-1)
	case useWatch:
		ss.nwatches.Add(-1)
	case usePrefix:
		ss.nprefix.Add(-1)
	}
}

// dropLocked forgets session x of lane. s.mu is held.
func (s *Service) dropLocked(lane laneKey, x *nsSession) {
	ss := s.sessions[lane]
	for i, y := range ss {
		if y == x {
			s.sessions[lane] = append(ss[:i], ss[i+1:]...)
			return
		}
	}
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
		ss, err := s.open(ctx, key, useCall)
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
