package server

import (
	"github.com/paxlock/paxlock/internal/adminguard"
)

// adminHosts returns the host names the admin endpoint answers to
// besides IP literals and localhost (see adminguard): its listen
// address's host, every address the configuration gives its nodes,
// admin_allowed_hosts, and, asked per request, the current members'
// addresses (a node added at run time).
func (s *Server) adminHosts() adminguard.Hosts {
	static := append([]string{adminguard.HostOf(s.cfg.AdminAddr)}, s.cfg.AdminAllowedHosts...)
	for _, n := range s.cfg.Nodes {
		static = append(static, nodeHosts(n)...)
	}
	return adminguard.Hosts{Static: static, Dynamic: func(h string) bool {
		for _, n := range s.nodes() {
			for _, nh := range nodeHosts(n) {
				if nh == h {
					return true
				}
			}
		}
		return false
	}}
}

// nodeHosts returns the host parts of n's addresses ("" for none).
func nodeHosts(n NodeAddr) []string {
	var out []string
	for _, a := range []string{n.Admin, n.Client, n.ClientTLS, n.Peer, n.Gossip} {
		if h := adminguard.HostOf(a); h != "" {
			out = append(out, h)
		}
	}
	return out
}
