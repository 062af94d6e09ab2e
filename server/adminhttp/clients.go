package adminhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// ClientQuery is GET /clients' query: a page of the client sessions
// served by node Node (0: every node, in node order) of namespace
// Namespace ("": all), after the cursor After (adminapi.ClientCursor),
// at most Limit. Local restricts it to this node (how one node asks
// another for its share).
type ClientQuery struct {
	Node      uint32
	Namespace string
	After     adminapi.ClientCursor
	HasAfter  bool
	Limit     int
	Local     bool
}

// ClientNode is what GET /clients asks of the node.
type ClientNode interface {
	// ListClients answers q: this node's sessions, and those of the
	// other nodes q names through their admin endpoints (q.Local: this
	// node's only). A node that did not answer is named in the page's
	// Missing; ErrNotFound when q.Node is no member.
	ListClients(ctx context.Context, q ClientQuery) (adminapi.ClientPage, error)
}

// listClients is GET /clients?node=&namespace=&after=&limit=: a page of
// the nodes' client sessions (adminapi.ClientPage), at most
// adminapi.MaxClientsLimit a page whatever the nodes serve. 400 for a
// bad query, 404 for a node that is no member.
func (h *handler) listClients(w http.ResponseWriter, r *http.Request) {
	q, err := parseClientQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), LockReadTimeout)
	defer cancel()
	page, err := h.Node.ListClients(ctx, q)
	switch {
	case errors.Is(err, ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		lockReadError(w, err)
	default:
		writeJSON(w, http.StatusOK, page)
	}
}

// parseClientQuery reads GET /clients' query.
func parseClientQuery(r *http.Request) (ClientQuery, error) {
	v := r.URL.Query()
	q := ClientQuery{Namespace: v.Get("namespace"), Limit: adminapi.ClientsLimit, Local: v.Get("local") == "1"}
	if q.Namespace != "" {
		if err := wire.ValidateNamespace(q.Namespace); err != nil {
			return q, fmt.Errorf("namespace: %w", err)
		}
	}
	if s := v.Get("node"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			return q, fmt.Errorf("node %q: want a node id", s)
		}
		q.Node = uint32(n)
	}
	if s := v.Get("after"); s != "" {
		c, err := adminapi.ParseClientCursor(s)
		if err != nil {
			return q, err
		}
		q.After, q.HasAfter = c, true
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > adminapi.MaxClientsLimit {
			return q, fmt.Errorf("limit %q: want 1 to %d", s, adminapi.MaxClientsLimit)
		}
		q.Limit = n
	}
	return q, nil
}
