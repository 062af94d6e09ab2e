package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/paxlock/paxlock/wire"
)

// GroupStatus is one group's state as this node sees it.
type GroupStatus struct {
	Group     int    `json:"group"`
	Master    uint32 `json:"master"`
	Epoch     uint64 `json:"epoch"`
	Serving   bool   `json:"serving"`
	Committed uint64 `json:"committed"`
	Applied   uint64 `json:"applied"`
	LogStart  uint64 `json:"log_start"`
	Locks     int64  `json:"locks"`
	Version   uint64 `json:"group_version"`
}

// Status is a node's report for operators (paxlockctl status).
type Status struct {
	Node        uint32        `json:"node"`
	Client      string        `json:"client"`
	ViewVersion uint64        `json:"view_version"`
	Conns       int64         `json:"conns"`
	Groups      []GroupStatus `json:"groups"`
	Nodes       []NodeAddr    `json:"nodes"`
}

// Status returns the node's report.
func (s *Server) Status() Status {
	v := s.view.Load()
	st := Status{Node: s.cfg.NodeID, Client: s.cfg.self().Client, ViewVersion: v.Version, Conns: s.nconns.Load(), Nodes: s.cfg.Nodes}
	for g, lg := range s.svc.Groups() {
		c, a, ls := lg.Paxos().Progress()
		gv := wire.GroupView{}
		if g < len(v.Groups) {
			gv = v.Groups[g]
		}
		st.Groups = append(st.Groups, GroupStatus{
			Group: g, Master: gv.Master, Epoch: gv.Epoch, Serving: lg.Serving(),
			Committed: c, Applied: a, LogStart: ls,
			Locks: lg.StateMachine().Count(), Version: lg.StateMachine().Version(),
		})
	}
	return st
}

func (s *Server) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Status())
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		st := s.Status()
		fmt.Fprintf(w, "paxlock_client_connections %d\n", st.Conns)
		fmt.Fprintf(w, "paxlock_requests_total %d\n", s.stats.requests.Load())
		fmt.Fprintf(w, "paxlock_redirects_total %d\n", s.stats.redirects.Load())
		fmt.Fprintf(w, "paxlock_overloaded_total %d\n", s.stats.overloaded.Load())
		fmt.Fprintf(w, "paxlock_bad_frames_total %d\n", s.stats.badFrames.Load())
		for _, g := range st.Groups {
			serving := 0
			if g.Serving {
				serving = 1
			}
			fmt.Fprintf(w, "paxlock_group_serving{group=\"%d\"} %d\n", g.Group, serving)
			fmt.Fprintf(w, "paxlock_group_applied{group=\"%d\"} %d\n", g.Group, g.Applied)
			fmt.Fprintf(w, "paxlock_group_locks{group=\"%d\"} %d\n", g.Group, g.Locks)
		}
	})
	return mux
}
