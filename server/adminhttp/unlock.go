package adminhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// forceUnlockWait bounds how long POST /locks/unlock waits for revoked
// holders to acknowledge before it answers 202 (pending).
const forceUnlockWait = 10 * time.Second

// forceUnlock frees a lock whoever holds it (POST {"namespace", "key"}):
// an operator's way out of a lock whose holder is stuck but renewing.
// Each hold is revoked (see group.Service.ForceRelease): its holder gets
// a Lost with EventRevoked, its renewals are refused, and it is removed
// through Paxos once the holder acknowledges or its TTL runs out, never
// before, so that two holders never overlap; its watchers then get an
// EventRevoked event and waiters are granted as after a release. A node
// that does not serve the key's group redirects to the one that does.
// The answer lists the holds removed (none: the key was free); HTTP 202
// with pending set when a holder had not acknowledged within
// forceUnlockWait (the revocation stands); 503 while the key's namespace
// is being moved, 409 once it moved away.
func (h *handler) forceUnlock(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST {\"namespace\": ..., \"key\": ...}", http.StatusMethodNotAllowed)
		return
	}
	var body struct{ Namespace, Key string }
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		http.Error(w, "body: want {\"namespace\": ..., \"key\": ...}", http.StatusBadRequest)
		return
	}
	if !h.Node.HasNamespace(body.Namespace) {
		http.Error(w, "unknown namespace", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), forceUnlockWait)
	defer cancel()
	rel, err := h.Node.ForceUnlock(ctx, body.Namespace, body.Key)
	pending := errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil
	if !pending && h.unlockRefused(w, r, body.Namespace, body.Key, len(rel), err) {
		return
	}
	out := adminapi.ForceUnlocked{Namespace: body.Namespace, Key: body.Key, Released: rel, Pending: pending}
	if out.Released == nil {
		out.Released = []adminapi.ReleasedHold{}
	}
	h.Log.Warn("lock force-released by an operator", "namespace", body.Namespace, "key", body.Key, "holds", len(rel), "err", err)
	w.Header().Set("Content-Type", "application/json")
	if pending {
		w.WriteHeader(http.StatusAccepted)
	} else if err != nil {
		// Some holds went before the error: say what was done.
		w.WriteHeader(http.StatusInternalServerError)
	}
	_ = json.NewEncoder(w).Encode(out)
}

// unlockRefused answers a force-unlock that removed nothing (released
// holds: n) for err, and reports whether it did; one that removed some
// holds is answered with them, whatever came after.
func (h *handler) unlockRefused(w http.ResponseWriter, r *http.Request, ns, key string, n int, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotMaster) && n > 0:
		// Mastership moved after some holds were removed: say what was
		// done (with an error status); the caller asks again.
		return false
	case errors.Is(err, ErrNotMaster):
		g, m := h.Node.KeyMaster(ns, key)
		if !h.redirectTo(w, r, m) {
			http.Error(w, fmt.Sprintf("this node does not serve the key's group %d (master: node %d); retry there", g, m), http.StatusServiceUnavailable)
		}
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrRetryLater) && n == 0:
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error()+": retry once the move ends", http.StatusServiceUnavailable)
	case errors.Is(err, ErrConflict) && n == 0:
		http.Error(w, err.Error()+": force-unlock it on that cluster", http.StatusConflict)
	case n == 0:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		return false
	}
	return true
}
