package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/scramauth"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
	"github.com/paxlock/paxlock/wire"
)

// replica returns this node's replica of lock group g's Paxos group (nil
// for a group the service does not run).
func (s *Server) replica(g int) *host.Replica {
	return s.host.Replica(group.ReplicationID(g))
}

// Status returns the node's report.
func (s *Server) Status() adminapi.Status {
	v := s.view.Load()
	st := adminapi.Status{Node: s.cfg.NodeID, Client: s.cfg.self().Client, ViewVersion: v.Version, Conns: s.nconns.Load(), Nodes: s.nodes()}
	if err := s.store.Err(); err != nil {
		st.StorageFailed, st.StorageError = true, err.Error()
	}
	st.Ready, st.ReadyReason = s.Ready()
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

// adminMux returns the admin endpoint's routes behind guardAdmin.
func (s *Server) adminMux() http.Handler {
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
	s.registryRoutes(mux)
	mux.HandleFunc("GET /namespaces/quotas", s.quotasHandler)
	mux.HandleFunc("GET /namespaces/{name}/quota", s.quotaHandler)
	mux.HandleFunc("PUT /namespaces/{name}/quota", s.quotaHandler)
	mux.HandleFunc("/locks/unlock", s.forceUnlockHandler)
	mux.HandleFunc("POST /drain", s.drainHandler)
	mux.HandleFunc("DELETE /drain", s.undrainHandler)
	mux.HandleFunc("/members", s.membersHandler)
	mux.HandleFunc("DELETE /members/{id}", s.memberDeleteHandler)
	mux.HandleFunc("POST /members/groups/{g}", s.groupChangeHandler)
	mux.HandleFunc("/backup", s.backupHandler)
	mux.HandleFunc("GET /backup/image", s.imageHandler)
	s.registerMoves(mux)
	mux.HandleFunc("/healthz", s.healthzHandler)
	mux.HandleFunc("/readyz", s.readyzHandler)
	if s.faults != nil {
		mux.HandleFunc("/debug/partition", s.faults.handle)
	}
	mux.Handle("/metrics", s.metrics.handler())
	return s.guardAdmin(mux)
}

// namespacesHandler lists (GET), adds or changes (POST
// adminapi.NamespacePut: a secret, or a verifier derived elsewhere) and
// removes (DELETE ?name=) namespaces. Changes are proposed to Paxos
// group 0, so a node that does not master it redirects to the one that
// does. Secrets are never logged or echoed.
func (s *Server) namespacesHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.svc.Namespaces())
		return
	}
	var name string
	var body adminapi.NamespacePut
	switch r.Method {
	case http.MethodPost:
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil || (body.Secret == "") == (body.Verifier == nil) {
			http.Error(w, "body: want {\"name\": ..., \"secret\": ...} or {\"name\": ..., \"verifier\": {...}}", http.StatusBadRequest)
			return
		}
		name = body.Name
	case http.MethodDelete:
		name = r.URL.Query().Get("name")
	default:
		http.Error(w, "use GET, POST or DELETE", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var err error
	switch {
	case r.Method == http.MethodPost && body.Verifier != nil:
		v := body.Verifier
		err = s.svc.PutNamespaceVerifier(ctx, name, scramauth.Verifier{Iters: v.Iters, Salt: v.Salt, StoredKey: v.StoredKey, ServerKey: v.ServerKey})
	case r.Method == http.MethodPost:
		err = s.svc.PutNamespace(ctx, name, body.Secret)
	default:
		err = s.svc.DeleteNamespace(ctx, name)
	}
	switch {
	case err == nil:
		s.log.Info("namespace changed", "name", name, "method", r.Method)
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, group.ErrNotSystemMaster):
		s.redirectToSystemMaster(w, r, "namespace table")
	case errors.Is(err, group.ErrUnknownNamespace):
		http.Error(w, "unknown namespace", http.StatusNotFound)
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// redirectTo redirects an admin request to node id's admin address (307,
// so a POST stays a POST and keeps its body). It reports false when id is
// this node, unknown, or has no admin address.
func (s *Server) redirectTo(w http.ResponseWriter, r *http.Request, id uint32) bool {
	if n := s.addr(paxos.NodeID(id)); n.ID != 0 {
		if n.Admin != "" && n.ID != s.cfg.NodeID {
			scheme := "http://"
			if s.sec.adminTLS != nil {
				scheme = "https://"
			}
			http.Redirect(w, r, scheme+n.Admin+r.URL.RequestURI(), http.StatusTemporaryRedirect)
			return true
		}
	}
	return false
}

// redirectToSystemMaster answers a change that only group 0's master can
// propose (to the namespace table, the registry tables): a redirect to
// that node, or 503 naming it when its admin address is unknown.
func (s *Server) redirectToSystemMaster(w http.ResponseWriter, r *http.Request, table string) {
	m := s.svc.SystemMaster()
	if !s.redirectTo(w, r, uint32(m)) {
		http.Error(w, fmt.Sprintf("this node does not master the %s (master: node %d); retry there", table, m), http.StatusServiceUnavailable)
	}
}

// forceUnlockWait bounds how long POST /locks/unlock waits for revoked
// holders to acknowledge before it answers 202 (pending).
const forceUnlockWait = 10 * time.Second

// forceUnlockHandler frees a lock whoever holds it (POST {"namespace",
// "key"}): an operator's way out of a lock whose holder is stuck but
// renewing. Each hold is revoked (see group.Service.ForceRelease):
// its holder gets a Lost with EventRevoked, its renewals are refused, and
// it is removed through Paxos once the holder acknowledges or its TTL
// runs out, never before, so that two holders never overlap; its
// watchers then get an EventRevoked event and waiters are granted as
// after a release. A node that does not serve the key's group redirects
// to the one that does. The answer lists the holds removed (none: the
// key was free); HTTP 202 with pending set when a holder had not
// acknowledged within forceUnlockWait (the revocation stands); 503
// while the key's namespace is being moved, 409 once it moved away.
func (s *Server) forceUnlockHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST {\"namespace\": ..., \"key\": ...}", http.StatusMethodNotAllowed)
		return
	}
	var body struct{ Namespace, Key string }
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		http.Error(w, "body: want {\"namespace\": ..., \"key\": ...}", http.StatusBadRequest)
		return
	}
	if !s.svc.HasNamespace(body.Namespace) {
		http.Error(w, "unknown namespace", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), forceUnlockWait)
	defer cancel()
	rel, err := s.svc.ForceRelease(ctx, body.Namespace, body.Key)
	pending := errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil
	switch {
	case pending:
		// Revoked, waiting for its holder: answered below.
	case errors.Is(err, group.ErrNotMaster) && len(rel) > 0:
		// Mastership moved after some holds were removed: say what was
		// done (below, with an error status); the caller asks again.
	case errors.Is(err, group.ErrNotMaster):
		g := wire.GroupOf(wire.KeyHash(body.Namespace, body.Key), len(s.svc.Groups()))
		var m uint32
		if v := s.view.Load(); g < len(v.Groups) {
			m = v.Groups[g].Master
		}
		if !s.redirectTo(w, r, m) {
			http.Error(w, fmt.Sprintf("this node does not serve the key's group %d (master: node %d); retry there", g, m), http.StatusServiceUnavailable)
		}
		return
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, group.ErrNamespaceMoving) && len(rel) == 0:
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error()+": retry once the move ends", http.StatusServiceUnavailable)
		return
	case errors.Is(err, group.ErrNamespaceMoved) && len(rel) == 0:
		http.Error(w, err.Error()+": force-unlock it on that cluster", http.StatusConflict)
		return
	case err != nil && len(rel) == 0:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := adminapi.ForceUnlocked{Namespace: body.Namespace, Key: body.Key, Released: []adminapi.ReleasedHold{}, Pending: pending}
	for _, h := range rel {
		out.Released = append(out.Released, adminapi.ReleasedHold{Client: h.Owner.Client, Owner: h.Owner.ID, Token: h.Token})
	}
	s.log.Warn("lock force-released by an operator", "namespace", body.Namespace, "key", body.Key, "holds", len(rel), "err", err)
	w.Header().Set("Content-Type", "application/json")
	if pending {
		w.WriteHeader(http.StatusAccepted)
	} else if err != nil {
		// Some holds went before the error: say what was done.
		w.WriteHeader(http.StatusInternalServerError)
	}
	_ = json.NewEncoder(w).Encode(out)
}
