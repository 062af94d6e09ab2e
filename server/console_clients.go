package server

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// clientSessions lists this node's authenticated client sessions for the
// console, longest connected first, at most adminapi.MaxConsoleClients,
// and whether there are more. Connections still in their handshake,
// closed ones and revoked sessions are left out.
func (s *Server) clientSessions() ([]adminapi.ClientSession, bool) {
	var out []adminapi.ClientSession
	s.conns.Range(func(k, _ any) bool {
		c := k.(*conn)
		a := c.auth.Load()
		if a == nil || c.closed.Load() || c.revoked.Load() {
			return true
		}
		cs := adminapi.ClientSession{Client: strconv.FormatUint(a.client, 16), Namespace: a.ns,
			Remote: c.fc.remote(), Connected: time.Unix(0, c.opened)}
		if a.relay {
			cs.Relay = c.peerNode
		}
		out = append(out, cs)
		return true
	})
	slices.SortFunc(out, func(a, b adminapi.ClientSession) int {
		if c := a.Connected.Compare(b.Connected); c != 0 {
			return c
		}
		return strings.Compare(a.Client, b.Client)
	})
	more := len(out) > adminapi.MaxConsoleClients
	return out[:min(len(out), adminapi.MaxConsoleClients)], more
}
