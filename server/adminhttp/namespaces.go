package adminhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// changeTimeout bounds a change proposed to lock group 0.
const changeTimeout = 10 * time.Second

// namespaces lists (GET), adds or changes (POST adminapi.NamespacePut: a
// secret, or a verifier derived elsewhere) and removes (DELETE ?name=)
// namespaces. Changes are proposed to lock group 0, so a node that does
// not master it redirects to the one that does. Secrets are never logged
// or echoed.
func (h *handler) namespaces(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h.Node.Namespaces())
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
	ctx, cancel := context.WithTimeout(r.Context(), changeTimeout)
	defer cancel()
	var err error
	switch {
	case r.Method == http.MethodPost && body.Verifier != nil:
		err = h.Node.PutNamespaceVerifier(ctx, name, *body.Verifier)
	case r.Method == http.MethodPost:
		err = h.Node.PutNamespace(ctx, name, body.Secret)
	default:
		err = h.Node.DeleteNamespace(ctx, name)
	}
	if err == nil {
		h.Log.Info("namespace changed", "name", name, "method", r.Method)
	}
	h.tableAnswer(w, r, err)
}

// tableAnswer maps the outcome of a change to the namespace table (a
// namespace, its quota) to HTTP: 204, a redirect to group 0's master,
// 404 (unknown namespace), 400 (bad input) or 500.
func (h *handler) tableAnswer(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrNotSystemMaster):
		h.redirectToSystemMaster(w, r, "namespace table")
	case errors.Is(err, ErrNotFound):
		http.Error(w, "unknown namespace", http.StatusNotFound)
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// quotas answers GET /namespaces/quotas: the namespaces with a quota,
// each with its use as this node sees it.
func (h *handler) quotas(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h.Node.Quotas())
}

// quota shows (GET) or sets (PUT adminapi.NamespaceQuota; all 0 removes
// it) namespace {name}'s quota. A change is proposed to group 0, so a
// node that does not master it redirects to the one that does.
func (h *handler) quota(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if r.Method == http.MethodGet {
		if !h.Node.HasNamespace(name) {
			http.Error(w, "unknown namespace", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h.Node.Quota(name))
		return
	}
	var q adminapi.NamespaceQuota
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		http.Error(w, `body: want {"held": N, "waiters": N, "rate": N, "burst": N} (0: unlimited)`, http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), changeTimeout)
	defer cancel()
	err := h.Node.PutQuota(ctx, name, q)
	if err == nil {
		h.Log.Info("namespace quota changed", "name", name, "held", q.Held, "waiters", q.Waiters, "rate", q.Rate, "burst", q.Burst)
	}
	h.tableAnswer(w, r, err)
}
