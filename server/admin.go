package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/paxlock/paxlock/group"
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
	Node        uint32 `json:"node"`
	Client      string `json:"client"`
	ViewVersion uint64 `json:"view_version"`
	Conns       int64  `json:"conns"`
	// StorageFailed says a write or fsync of the node's store failed:
	// the node stopped all its groups (fail-stop) and serves none until it
	// is restarted on a working disk. StorageError is that failure.
	StorageFailed bool          `json:"storage_failed"`
	StorageError  string        `json:"storage_error,omitempty"`
	Groups        []GroupStatus `json:"groups"`
	Nodes         []NodeAddr    `json:"nodes"`
	// Ready and ReadyReason are what /readyz answers (see Ready).
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"ready_reason"`
	// HotKeys and MasterChanges are filled by /status?detail=1 only (see
	// StatusDetail): the keys with the most waiters on the groups this
	// node serves, and the last master changes it saw, newest first.
	HotKeys       []group.HotKey `json:"hot_keys,omitempty"`
	MasterChanges []MasterChange `json:"master_changes,omitempty"`
}

// Status returns the node's report.
func (s *Server) Status() Status {
	v := s.view.Load()
	st := Status{Node: s.cfg.NodeID, Client: s.cfg.self().Client, ViewVersion: v.Version, Conns: s.nconns.Load(), Nodes: s.cfg.Nodes}
	if err := s.store.Err(); err != nil {
		st.StorageFailed, st.StorageError = true, err.Error()
	}
	st.Ready, st.ReadyReason = s.Ready()
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
		if r.URL.Query().Get("detail") == "1" {
			ctx, cancel := context.WithTimeout(r.Context(), consolePeerTimeout)
			defer cancel()
			_ = enc.Encode(s.StatusDetail(ctx))
			return
		}
		_ = enc.Encode(s.Status())
	})
	mux.HandleFunc("GET /{$}", consolePage)
	mux.HandleFunc("GET /console", consolePage)
	mux.HandleFunc("GET /console/{file}", consoleAsset)
	mux.HandleFunc("GET /cluster", s.clusterHandler)
	mux.HandleFunc("GET /events", s.eventsHandler)
	mux.HandleFunc("/namespaces", s.namespacesHandler)
	mux.HandleFunc("/healthz", s.healthzHandler)
	mux.HandleFunc("/readyz", s.readyzHandler)
	if s.faults != nil {
		mux.HandleFunc("/debug/partition", s.faults.handle)
	}
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		st := s.Status()
		fmt.Fprintf(w, "paxlock_client_connections %d\n", st.Conns)
		fmt.Fprintf(w, "paxlock_requests_total %d\n", s.stats.requests.Load())
		fmt.Fprintf(w, "paxlock_redirects_total %d\n", s.stats.redirects.Load())
		fmt.Fprintf(w, "paxlock_forwarded_total %d\n", s.stats.forwarded.Load())
		fmt.Fprintf(w, "paxlock_relays_opened_total %d\n", s.stats.relays.Load())
		fmt.Fprintf(w, "paxlock_overloaded_total %d\n", s.stats.overloaded.Load())
		fmt.Fprintf(w, "paxlock_bad_frames_total %d\n", s.stats.badFrames.Load())
		fmt.Fprintf(w, "paxlock_slow_consumers_total %d\n", s.stats.slowConsumers.Load())
		fmt.Fprintf(w, "paxlock_peer_refused_total %d\n", s.tr.Stats().Refused)
		failed := 0
		if st.StorageFailed {
			failed = 1
		}
		fmt.Fprintf(w, "paxlock_storage_failed %d\n", failed)
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

// namespacesHandler lists (GET), adds or changes (POST {"name","secret"})
// and removes (DELETE ?name=) namespaces. Changes are proposed to Paxos
// group 0, so a node that does not master it redirects to the one that
// does. Secrets are never logged or echoed.
func (s *Server) namespacesHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.svc.Namespaces())
		return
	}
	var name, secret string
	switch r.Method {
	case http.MethodPost:
		var body struct{ Name, Secret string }
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
			http.Error(w, "body: want {\"name\": ..., \"secret\": ...}", http.StatusBadRequest)
			return
		}
		name, secret = body.Name, body.Secret
	case http.MethodDelete:
		name = r.URL.Query().Get("name")
	default:
		http.Error(w, "use GET, POST or DELETE", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var err error
	if r.Method == http.MethodPost {
		err = s.svc.PutNamespace(ctx, name, secret)
	} else {
		err = s.svc.DeleteNamespace(ctx, name)
	}
	switch {
	case err == nil:
		s.log.Info("namespace changed", "name", name, "method", r.Method)
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, group.ErrNotSystemMaster):
		m := s.svc.SystemMaster()
		for _, n := range s.cfg.Nodes {
			if uint32(m) == n.ID && n.Admin != "" && n.ID != s.cfg.NodeID {
				scheme := "http://"
				if s.sec.adminTLS != nil {
					scheme = "https://"
				}
				http.Redirect(w, r, scheme+n.Admin+r.URL.RequestURI(), http.StatusTemporaryRedirect)
				return
			}
		}
		http.Error(w, fmt.Sprintf("this node does not master the namespace table (master: node %d); retry there", m), http.StatusServiceUnavailable)
	case errors.Is(err, group.ErrUnknownNamespace):
		http.Error(w, "unknown namespace", http.StatusNotFound)
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
