package adminhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// LockReadTimeout bounds an admin lock read (GET /locks, GET
// /locks/{ns}/{key}), the masters' answers gathered.
const LockReadTimeout = 5 * time.Second

// LockQuery is GET /locks' query: a page of namespace Namespace's held
// locks whose keys start with Prefix, after the key After, at most Limit.
// Groups restricts it to those lock groups (nil: every one) and Local to
// the groups this node masters (how one node asks another for its share;
// Missing in the answer's error names the others).
type LockQuery struct {
	Namespace, Prefix, After string
	Limit                    int
	Groups                   []int
	Local                    bool
}

// LockNode is what the admin lock reads ask of the node.
type LockNode interface {
	// ListLocks answers q from every group's master: this node for the
	// groups it serves, the other masters' admin endpoints for theirs
	// (q.Local: this node's groups only). It is ErrNotMaster when a
	// group has no master that answered.
	ListLocks(ctx context.Context, q LockQuery) (adminapi.LockPage, error)
	// InspectKey is key's detail from its group's master, this node
	// (ErrNotMaster elsewhere): holders, lock-delay, waiter queue.
	InspectKey(ctx context.Context, ns, key string) (adminapi.LockDetail, error)
}

// listLocks is GET /locks?namespace=&prefix=&after=&limit=: a page of a
// namespace's held locks, in key order, with the cursor of the next page
// (adminapi.LockPage). The admin token reads any namespace, no secret
// needed. 404 for an unknown namespace, 400 for a bad query, 503 while a
// group has no master.
func (h *handler) listLocks(w http.ResponseWriter, r *http.Request) {
	q, err := parseLockQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !h.Node.HasNamespace(q.Namespace) {
		http.Error(w, "unknown namespace", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), LockReadTimeout)
	defer cancel()
	page, err := h.Node.ListLocks(ctx, q)
	if err != nil {
		lockReadError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// parseLockQuery reads GET /locks' query.
func parseLockQuery(r *http.Request) (LockQuery, error) {
	v := r.URL.Query()
	q := LockQuery{Namespace: v.Get("namespace"), Prefix: v.Get("prefix"), After: v.Get("after"), Limit: adminapi.ListLimit, Local: v.Get("local") == "1"}
	if q.Namespace == "" {
		return q, errors.New("want ?namespace=NAME")
	}
	if len(q.Prefix) > wire.MaxKeyLen || len(q.After) > wire.MaxKeyLen {
		return q, fmt.Errorf("prefix or after longer than %d bytes", wire.MaxKeyLen)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > adminapi.MaxListLimit {
			return q, fmt.Errorf("limit %q: want 1 to %d", s, adminapi.MaxListLimit)
		}
		q.Limit = n
	}
	if s := v.Get("groups"); s != "" {
		for _, f := range strings.Split(s, ",") {
			g, err := strconv.Atoi(f)
			if err != nil || g < 0 || g >= 1<<16 {
				return q, fmt.Errorf("groups %q: want group numbers, comma-separated", s)
			}
			q.Groups = append(q.Groups, g)
		}
	}
	return q, nil
}

// inspectKey is GET /locks/{namespace}/{key}: the key's holders with
// their values, tokens, validity and lock-delays, the lock-delay in
// force and the waiter queue with weights (adminapi.LockDetail), from
// the key's master; another node redirects there (307). 404 for an
// unknown namespace, 503 while the group has no master.
func (h *handler) inspectKey(w http.ResponseWriter, r *http.Request) {
	ns, key := r.PathValue("ns"), r.PathValue("key")
	if !h.Node.HasNamespace(ns) {
		http.Error(w, "unknown namespace", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), LockReadTimeout)
	defer cancel()
	d, err := h.Node.InspectKey(ctx, ns, key)
	if errors.Is(err, ErrNotMaster) {
		g, m := h.Node.KeyMaster(ns, key)
		if !h.redirectTo(w, r, m) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("this node does not serve the key's group %d (master: node %d); retry there", g, m), http.StatusServiceUnavailable)
		}
		return
	}
	if err != nil {
		lockReadError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// lockReadError answers a lock read's error.
func lockReadError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrNotMaster), errors.Is(err, context.DeadlineExceeded):
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
