package server

import (
	"slices"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// clientSessions lists this node's authenticated client sessions for the
// console, longest connected first, at most adminapi.MaxConsoleClients,
// and whether there are more.
func (s *Server) clientSessions() ([]adminapi.ClientSession, bool) {
	out, more := s.localSessions("", adminapi.ClientCursor{}, false, adminapi.MaxConsoleClients)
	return out, more
}

// localSessions is this node's authenticated client sessions of
// namespace ns ("": all) in adminapi.ClientCursor order, those after
// after when hasAfter, at most limit, and whether there are more.
// Connections still in their handshake, closed ones and revoked
// sessions are left out. It walks every connection (a page costs the
// node's sessions in time, not in the answer's size).
func (s *Server) localSessions(ns string, after adminapi.ClientCursor, hasAfter bool, limit int) ([]adminapi.ClientSession, bool) {
	var out []adminapi.ClientSession
	s.conns.Range(func(k, _ any) bool {
		c := k.(*conn)
		a := c.auth.Load()
		if a == nil || c.closed.Load() || c.revoked.Load() || ns != "" && a.ns != ns {
			return true
		}
		cs := adminapi.ClientSession{Client: strconv.FormatUint(a.client, 16), Namespace: a.ns,
			Remote: c.fc.remote(), Connected: time.Unix(0, c.opened), Node: s.cfg.NodeID, TLS: c.tlsPort}
		if hasAfter && adminapi.CursorOf(cs).Compare(after) <= 0 {
			return true
		}
		if a.relay {
			cs.Relay = c.peerNode
		}
		u := s.svc.ConnUsage(c)
		cs.InFlight, cs.Waits, cs.Watches, cs.PrefixWatches = c.inflight.Load(), u.Waits, u.Watches, u.PrefixWatches
		out = append(out, cs)
		return true
	})
	slices.SortFunc(out, func(a, b adminapi.ClientSession) int { return adminapi.CursorOf(a).Compare(adminapi.CursorOf(b)) })
	more := len(out) > limit
	return out[:min(len(out), limit)], more
}
