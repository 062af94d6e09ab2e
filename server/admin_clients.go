package server

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// GET /clients: the client sessions of every node, a page at a time.
// Each node lists its own; the node asked walks the members in id order
// and asks each peer's admin endpoint for its share (local=1), until the
// page is full.

// ListClients implements adminhttp.ClientNode.
func (n adminNode) ListClients(ctx context.Context, q adminhttp.ClientQuery) (adminapi.ClientPage, error) {
	page := adminapi.ClientPage{Clients: []adminapi.ClientSession{}}
	if q.Local {
		q.Node = n.cfg.NodeID
	}
	var ids []uint32
	for _, a := range n.nodes() {
		if q.Node == 0 || a.ID == q.Node {
			ids = append(ids, a.ID)
		}
	}
	if len(ids) == 0 {
		return page, fmt.Errorf("node %d: %w", q.Node, adminhttp.ErrNotFound)
	}
	slices.Sort(ids)
	for i, id := range ids {
		if q.HasAfter && id < q.After.Node {
			continue
		}
		share := q
		share.HasAfter = q.HasAfter && id == q.After.Node
		share.Limit = q.Limit - len(page.Clients)
		got, more, err := n.nodeClients(ctx, id, share)
		if err != nil {
			n.log.Debug("admin: a node's client sessions", "node", id, "err", err)
			page.Missing = append(page.Missing, id)
			continue
		}
		page.Clients = append(page.Clients, got...)
		if len(page.Clients) >= q.Limit {
			// Full: there may be more on this node, or on the next ones.
			if more || i < len(ids)-1 {
				page.Next = adminapi.CursorOf(page.Clients[len(page.Clients)-1]).String()
			}
			break
		}
	}
	return page, nil
}

// nodeClients is node id's share of q: its sessions after the cursor,
// at most q.Limit, and whether it has more.
func (n adminNode) nodeClients(ctx context.Context, id uint32, q adminhttp.ClientQuery) ([]adminapi.ClientSession, bool, error) {
	if id == n.cfg.NodeID {
		got, more := n.localSessions(q.Namespace, q.After, q.HasAfter, q.Limit)
		return got, more, nil
	}
	vals := url.Values{"node": {strconv.FormatUint(uint64(id), 10)}, "limit": {strconv.Itoa(q.Limit)}, "local": {"1"}}
	if q.Namespace != "" {
		vals.Set("namespace", q.Namespace)
	}
	if q.HasAfter {
		vals.Set("after", q.After.String())
	}
	var page adminapi.ClientPage
	if err := n.peerGet(ctx, id, "/clients", vals, &page); err != nil {
		return nil, false, err
	}
	if len(page.Clients) > q.Limit {
		page.Clients = page.Clients[:q.Limit]
	}
	return page.Clients, page.Next != "", nil
}
