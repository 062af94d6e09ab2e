package server

import (
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// handleFrame serves one request; raw is its whole frame. It runs the
// prelude every request passes (a revoked session, the frame's type and
// body, a namespace's connection bound, the session's own requests, the
// request's validity, the handshake) and routes what is left to its job.
func (c *conn) handleFrame(f wire.Frame, raw []byte) {
	c.s.stats.requests.Add(1)
	if c.refuseRevoked(f.ReqID) {
		return
	}
	m, ok := session.DecodeRequest(f, c.decode, c)
	if !ok || c.namespaceFull(f.ReqID, m) || !c.sess.Admit(f.ReqID, m, c) {
		return
	}
	switch m := m.(type) {
	case *wire.SubscribeRegistry:
		c.subscribeRegistry(f.ReqID, m)
	case *wire.List:
		c.list(f.ReqID, c.sess.Identity().Namespace, m)
	case *wire.MultiAcquire:
		c.multiAcquire(f.ReqID, raw, m)
	case *wire.Watch:
		if m.Flags.Has(wire.FlagPrefix) {
			c.prefixWatch(f.ReqID, raw, m, &group.Request{Op: group.OpWatch, Key: m.Key, WatchID: m.WatchID, Flags: m.Flags}, m.Group)
			return
		}
		c.submit(f, raw, m)
	case *wire.Unwatch:
		if m.Flags.Has(wire.FlagPrefix) {
			c.prefixWatch(f.ReqID, raw, m, &group.Request{Op: group.OpUnwatch, Key: m.Key, WatchID: m.WatchID, Flags: m.Flags}, m.Group)
			return
		}
		c.submit(f, raw, m)
	default:
		c.submit(f, raw, m)
	}
}

// refuseRevoked answers request reqID AUTH_FAILED if the session lost
// its authentication (see checkRevoked), and reports whether it did.
func (c *conn) refuseRevoked(reqID uint64) bool {
	if !c.revoked.Load() {
		return false
	}
	c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "session revoked: namespace removed or its secret changed"})
	return true
}

// submit serves a request on one key (requestOf): to the lock service
// if this node masters the key's group (or was elected to), forwarded to
// the master or redirected there otherwise.
func (c *conn) submit(f wire.Frame, raw []byte, m wire.Message) {
	s := c.s
	start := group.Nanotime()
	r, ok := requestOf(m)
	if !ok {
		c.Reply(f.ReqID, wire.Response{Status: wire.StatusBadRequest, Msg: "unsupported request " + f.Type.String()})
		return
	}
	id := c.sess.Identity()
	if !c.ownOwner(f.ReqID, r.Owner, id) {
		return
	}
	r.Namespace, r.ReqID, r.Sink, r.Start = id.Namespace, f.ReqID, c, start
	r.Hash = wire.KeyHash(id.Namespace, r.Key)
	g := group.Of(r.Hash, s.cfg.Groups)
	lg := s.svc.Group(g)
	forward := false
	// A master-elect (elected, applying what was chosen before its
	// ballot) takes the request: its worker decides it the moment the
	// node serves. The view already names this node, so a redirect could
	// only answer NO_MASTER and send the client into its backoff.
	if !lg.Serving() && !lg.Elected() {
		rt, _ := m.(wire.Routed)
		if forward = rt != nil && c.forwardable(g, rt); !forward {
			c.redirect(f.ReqID, g)
			return
		}
	}
	if !c.takeInflight(f.ReqID) {
		return
	}
	if forward {
		if s.tracing != nil {
			s.tracing.relayed(m, r, f.Type.String(), uint32(s.view.Load().Groups[g].Master))
		}
		c.forward(g, raw, f.ReqID)
		return
	}
	if s.tracing != nil {
		r.Trace = s.tracing.startRequest(m, r, f.Type.String())
	}
	s.svc.Submit(r)
}

// ownOwner reports whether owner may be named by the session id, and
// answers request reqID AUTH_FAILED if not. Owners are bound to the
// session: its Hello proved the client id with the client's key
// (wire.ClientIDOf), and a request for another client's owner (a holder
// copied from a State answer, say) is not this connection's to make.
// AUTH_FAILED, not LOCK_CHANGED_OWNER: the request is refused for who
// sent it, before any lock is looked at, and a client must not read it
// as news about the lock. Acquire, Renew, Release and CancelWait carry
// an Owner (validated nonzero); State, Watch and Unwatch carry none (a
// zero owner passes), and watches are bound to the connection that made
// them.
func (c *conn) ownOwner(reqID uint64, owner wire.Owner, id session.Identity) bool {
	if owner.Client == 0 || owner.Client == id.ClientID {
		return true
	}
	c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "owner's client id is not this session's"})
	return false
}

// takeInflight counts one more request in flight on the connection, or
// answers request reqID OVERLOADED when max_inflight are already, and
// reports whether it counted it (Respond uncounts it).
func (c *conn) takeInflight(reqID uint64) bool {
	if c.inflight.Add(1) <= int64(c.s.cfg.MaxInflight) {
		return true
	}
	c.inflight.Add(-1)
	c.s.stats.overloaded.Add(1)
	c.Reply(reqID, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: 10, Msg: "too many requests in flight on this connection"})
	return false
}

// multiAcquire serves a MultiAcquire: its keys must share a lock group,
// whose master decides them in one command (group.SubmitMulti); a
// node that is not that master redirects or forwards it like any routed
// request.
func (c *conn) multiAcquire(reqID uint64, raw []byte, m *wire.MultiAcquire) {
	s := c.s
	id := c.sess.Identity()
	if m.Client != id.ClientID {
		c.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "owner's client id is not this session's"})
		return
	}
	g := group.ID(-1)
	keys := make([]group.MultiKey, len(m.Keys))
	for i, k := range m.Keys {
		kg := group.Of(wire.KeyHash(id.Namespace, k), s.cfg.Groups)
		if g >= 0 && kg != g {
			c.Reply(reqID, wire.Response{Status: wire.StatusBadRequest, Msg: "multi-acquire: keys of different lock groups"})
			return
		}
		g = kg
		keys[i] = group.MultiKey{Key: k, Owner: m.Owner(i)}
	}
	if !s.svc.Group(g).Serving() {
		if !c.forwardable(g, m) {
			c.redirect(reqID, g)
			return
		}
		if c.inflight.Add(1) > int64(s.cfg.MaxInflight) {
			c.inflight.Add(-1)
			c.Reply(reqID, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: 10})
			return
		}
		c.forward(g, raw, reqID)
		return
	}
	if !c.takeInflight(reqID) {
		return
	}
	r := &group.Request{Namespace: id.Namespace, ReqID: reqID, Sink: c, Start: group.Nanotime(),
		Owner: keys[0].Owner, Kind: wire.KindExclusive, TTL: time.Duration(m.TTLMs) * time.Millisecond, Value: m.Value}
	s.svc.SubmitMulti(r, keys)
}

// list answers a List: the master of its group lists the namespace's
// locks (see group.Service.List); another node redirects, and nothing
// forwards it (a client asks every group's master, so a redirect is cheap).
func (c *conn) list(reqID uint64, ns string, m *wire.List) {
	s := c.s
	g := group.ID(m.Group)
	if int(g) >= s.cfg.Groups {
		c.Reply(reqID, wire.Response{Status: wire.StatusBadRequest, Msg: fmt.Sprintf("list: group %d out of range (0..%d)", g, s.cfg.Groups-1)})
		return
	}
	if !s.svc.Group(g).Serving() {
		c.redirect(reqID, g)
		return
	}
	if !c.takeInflight(reqID) {
		return
	}
	limit := int(m.Limit)
	if limit == 0 {
		limit = wire.DefaultListLimit
	}
	s.svc.List(ns, g, m.Prefix, m.After, limit, func(r wire.Response) { c.Respond(reqID, r) })
}

// prefixWatch answers a prefix watch or unwatch r (wire.FlagPrefix) on
// group g, whose whole frame is raw: the master of g keeps it (see
// group.Service.SubmitPrefix); another node redirects, or forwards it to
// the master as it forwards any routed request (forwardable: the API's
// sessions send theirs with wire.ForwardNow), the master's pushes coming
// back over the relay. A client of its own registers with every group's
// master, as it lists.
func (c *conn) prefixWatch(reqID uint64, raw []byte, rt wire.Routed, r *group.Request, g uint32) {
	s := c.s
	if int(g) >= s.cfg.Groups {
		c.Reply(reqID, wire.Response{Status: wire.StatusBadRequest, Msg: fmt.Sprintf("prefix watch: group %d out of range (0..%d)", g, s.cfg.Groups-1)})
		return
	}
	lg := s.svc.Group(group.ID(g))
	forward := false
	if !lg.Serving() && !lg.Elected() {
		if forward = c.forwardable(group.ID(g), rt); !forward {
			c.redirect(reqID, group.ID(g))
			return
		}
	}
	if !c.takeInflight(reqID) {
		return
	}
	if forward {
		c.forward(group.ID(g), raw, reqID)
		return
	}
	r.Namespace, r.ReqID, r.Sink, r.Start = c.sess.Identity().Namespace, reqID, c, group.Nanotime()
	s.svc.SubmitPrefix(r, group.ID(g))
}

// decode decodes a request body, into the connection's reused value for
// the hot request types.
func (c *conn) decode(f wire.Frame) (wire.Message, error) {
	var m wire.Message
	switch f.Type {
	case wire.TypeAcquire:
		m = &c.acq
	case wire.TypeRelease:
		m = &c.rel
	case wire.TypeRenew:
		m = &c.ren
	case wire.TypeState:
		m = &c.st
	default:
		return c.dec.Decode(f.Type, f.Body)
	}
	if err := c.dec.DecodeInto(f.Body, m); err != nil {
		return nil, err
	}
	return m, nil
}

// forwardable reports whether this node, which is not group g's master,
// should forward rt to the master rather than redirect the client: the
// client has used up the redirect budget (or cannot reach the master at
// all), the request did not come through another node's relay, and the
// master is known, is another node, and can be relayed to (see
// relayAddr). See wire.Routed.
func (c *conn) forwardable(g group.ID, rt wire.Routed) bool {
	after := c.s.cfg.ForwardAfter
	if after < 0 || c.sess.Identity().Via != 0 || int(rt.RedirectCount()) < after {
		return false
	}
	gv := c.s.view.Load().Groups[g]
	return gv.Master != 0 && gv.Master != c.s.cfg.NodeID && c.s.relayAddr(gv.Master) != ""
}

// redirect tells the client where group g's master is, or that it has
// none right now.
func (c *conn) redirect(reqID uint64, g group.ID) {
	v := c.view()
	gv := v.Groups[g]
	if gv.Master != 0 && gv.Master != c.s.cfg.NodeID && gv.Addr != "" {
		c.s.stats.redirects.Add(1)
		c.Reply(reqID, wire.Response{Status: wire.StatusMasterRedirect, Redirect: gv.Addr, ViewVersion: v.Version})
		return
	}
	c.Reply(reqID, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50})
}
