package adminhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// DetailTimeout bounds GET /status?detail=1 (the hot keys' gathering),
// and so a node's wait for a peer's detailed status.
const DetailTimeout = 2 * time.Second

// status answers GET /status: the node's adminapi.Status, with the
// console's detail when ?detail=1.
func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if r.URL.Query().Get("detail") == "1" {
		ctx, cancel := context.WithTimeout(r.Context(), DetailTimeout)
		defer cancel()
		_ = enc.Encode(h.Node.StatusDetail(ctx))
		return
	}
	_ = enc.Encode(h.Node.Status())
}

// healthz answers 200 while the process serves its admin endpoint.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz answers 200 when Node.Ready does, 503 with its reason when not.
func (h *handler) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	ok, why := h.Node.Ready()
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, why)
}

// drain is POST /drain: the node hands the groups it masters to its
// peers and masters none until it restarts or DELETE /drain undoes it.
// 200 with adminapi.Drained, served or not; 409 with the reason when the
// node refuses (a drain that would leave a group without a quorum).
func (h *handler) drain(w http.ResponseWriter, r *http.Request) {
	d, err := h.Node.Drain(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	h.Log.Info("drained on request", "groups", d.Groups, "served", d.Served, "reason", d.Reason, "took_ms", d.TookMs)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}

// undrain is DELETE /drain: it undoes a drain without a restart. 200
// with adminapi.Drained (Groups empty, Served true once the peers were
// told); 409 when the node has nothing to undo.
func (h *handler) undrain(w http.ResponseWriter, r *http.Request) {
	d, err := h.Node.Undrain(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	h.Log.Info("undrained on request", "told_peers", d.Served, "reason", d.Reason, "took_ms", d.TookMs)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}
