package adminhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The console's lock page reads and force-unlocks a key through the node
// that serves the page: GET /cluster/locks/{ns}/{key} and POST
// /cluster/unlock are GET /locks/{ns}/{key} and POST /locks/unlock
// answered by the key's master, which this node asks itself when it is
// another node. A redirect would send the browser to another origin,
// which neither has the page's token nor lets the page read its answer.

// Forwarded is a peer's answer to a forwarded admin request.
type Forwarded struct {
	Status      int
	ContentType string
	Body        []byte
}

// ForwardNode is what the console's lock reads ask of the node.
type ForwardNode interface {
	// Forward sends method uri (a path and query) with body (nil: none;
	// else JSON) to node id's admin endpoint with this node's admin
	// token, and returns its answer, redirects not followed.
	Forward(ctx context.Context, id uint32, method, uri string, body []byte) (Forwarded, error)
}

// maxForwardBody bounds a forwarded request's body (a force-unlock's).
const maxForwardBody = 4096

// consoleInspect is GET /cluster/locks/{ns}/{key}: GET /locks/{ns}/{key}
// from the key's master, wherever it is.
func (h *handler) consoleInspect(w http.ResponseWriter, r *http.Request) {
	ns, key := r.PathValue("ns"), r.PathValue("key")
	if !h.Node.HasNamespace(ns) {
		http.Error(w, "unknown namespace", http.StatusNotFound)
		return
	}
	_, m := h.Node.KeyMaster(ns, key)
	if h.Node.AdminAddr(m) == "" {
		h.inspectKey(w, r)
		return
	}
	uri := strings.TrimPrefix(r.URL.EscapedPath(), "/cluster")
	h.forward(w, r, m, http.MethodGet, uri, nil, LockReadTimeout)
}

// consoleUnlock is POST /cluster/unlock: POST /locks/unlock on the key's
// master, wherever it is.
func (h *handler) consoleUnlock(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxForwardBody))
	if err != nil {
		http.Error(w, "body: want {\"namespace\": ..., \"key\": ...}", http.StatusBadRequest)
		return
	}
	var body struct{ Namespace, Key string }
	if err := json.Unmarshal(b, &body); err != nil {
		http.Error(w, "body: want {\"namespace\": ..., \"key\": ...}", http.StatusBadRequest)
		return
	}
	_, m := h.Node.KeyMaster(body.Namespace, body.Key)
	if !h.Node.HasNamespace(body.Namespace) || h.Node.AdminAddr(m) == "" {
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.forceUnlock(w, r)
		return
	}
	h.forward(w, r, m, http.MethodPost, "/locks/unlock", b, forceUnlockWait+LockReadTimeout)
}

// forward answers r with node m's answer to method uri: its status and
// body, or 503 when m cannot be asked or sent it elsewhere (its
// mastership moved: the page asks again).
func (h *handler) forward(w http.ResponseWriter, r *http.Request, m uint32, method, uri string, body []byte, d time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	f, err := h.Node.Forward(ctx, m, method, uri, body)
	switch {
	case err != nil:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("the key's master, node %d: %v", m, err), http.StatusServiceUnavailable)
		return
	case f.Status >= 300 && f.Status < 400:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("node %d no longer serves the key; retry", m), http.StatusServiceUnavailable)
		return
	}
	if f.ContentType != "" {
		w.Header().Set("Content-Type", f.ContentType)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(f.Status)
	_, _ = w.Write(f.Body)
}
