package server

import (
	"net"
	"net/http"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/buildinfo"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// replica returns this node's replica of lock group g's Paxos group (nil
// for a group the service does not run).
func (s *Server) replica(g group.ID) *host.Replica {
	return s.host.Replica(g.ReplicaGroup())
}

// Status returns the node's report.
func (s *Server) Status() adminapi.Status {
	v := s.view.Load()
	st := adminapi.Status{Node: s.cfg.NodeID, Client: s.cfg.self().Client, ViewVersion: v.Version, Conns: s.nconns.Load(), Nodes: s.nodes()}
	if err := s.store.Err(); err != nil {
		st.StorageFailed, st.StorageError = true, err.Error()
	}
	st.Ready, st.ReadyReason = s.Ready()
	st.Started, st.UptimeMs = s.started, time.Since(s.started).Milliseconds()
	if in, ok := buildinfo.Current(); ok {
		st.Build, st.Version = in, in.String()
	}
	gms := s.groupMembers()
	for g, lg := range s.svc.Groups() {
		c, a, ls := lg.Consensus().Progress()
		gv := wire.GroupView{}
		if g < len(v.Groups) {
			gv = v.Groups[g]
		}
		st.Groups = append(st.Groups, adminapi.GroupStatus{
			Group: g, Master: gv.Master, Epoch: gv.Epoch, Serving: lg.Serving(),
			Committed: c, Applied: a, LogStart: ls,
			Locks: lg.StateMachine().Count(), Version: lg.StateMachine().Version(),
			Members: gms[g].Members, MemberChange: gms[g].Pending,
		})
	}
	return st
}

// adminHandler returns the admin endpoint's handler (adminhttp), over
// this node.
func (s *Server) adminHandler() http.Handler {
	cfg := adminhttp.Config{
		Node: adminErrNode{adminNode{s}}, Token: s.sec.adminToken, PublicRead: s.cfg.AdminPublicRead,
		Hosts: s.adminHosts(), HTTPS: s.sec.adminTLS != nil,
		WriteTimeout: time.Duration(s.cfg.AdminWriteTimeout), MemberChangeTimeout: MemberChangeTimeout, Done: s.life.Done(),
		Metrics: s.metrics.handler(), Log: s.log, Audit: adminNode{s},
	}
	if s.faults != nil {
		cfg.Partition = s.faults.handle
	}
	return adminhttp.New(cfg)
}

// adminAddr returns node id's admin address, "" when id is this node,
// unknown, or has no admin address.
func (s *Server) adminAddr(id uint32) string {
	if n := s.addr(paxos.NodeID(id)); n.ID != 0 && n.Admin != "" && n.ID != s.cfg.NodeID {
		return n.Admin
	}
	return ""
}

// adminServer returns the admin endpoint's server for handler h, and ln
// bounded as ConnLimits says (adminhttp.NewServer).
func (s *Server) adminServer(h http.Handler, ln net.Listener) (*http.Server, net.Listener) {
	l := s.cfg.ConnLimits
	return adminhttp.NewServer(h, ln, adminhttp.Limits{MaxConns: l.AdminMaxConns,
		ReadTimeout: time.Duration(l.AdminReadTimeout), WriteTimeout: time.Duration(l.AdminWriteTimeout), IdleTimeout: time.Duration(l.AdminIdleTimeout)})
}
