// This file follows a namespace that moved to another cluster (MOVED):
// the view is fetched from the registry, or from the addresses the answer
// named, and the client goes on there as after a master change.

package client

import (
	"context"
	"fmt"
	"strings"

	"github.com/paxlock/paxlock/client/wire"
)

// followMoved notes that the namespace moved away from the cluster of the
// current view; redirect is the MOVED answer's list of the new cluster's
// client addresses (comma-separated, possibly empty), by the node at
// addr. The next view refresh, asked for now, finds the new cluster
// (resolveMove). An answer of a cluster the client has left already (a
// request sent before it followed) changes nothing.
func (c *Client) followMoved(redirect, by string) {
	if from := c.moveFrom.Load(); from != nil && (*from)[by] {
		return
	}
	n := &moveNote{by: by}
	for _, a := range strings.Split(redirect, ",") {
		if a = strings.TrimSpace(a); a != "" {
			n.seeds = append(n.seeds, a)
		}
	}
	if prev := c.moveSeeds.Load(); prev != nil && len(n.seeds) == 0 {
		n.seeds = prev.seeds // a MOVED without addresses keeps those known
	}
	c.moveSeeds.Store(n)
	c.refresh()
}

// moveNote is a MOVED answer to follow: the new cluster's addresses it
// named, and the node that answered.
type moveNote struct {
	seeds []string
	by    string
}

// leftCluster reports whether v is a view of the cluster the namespace
// moved away from (it names one of that cluster's addresses).
func (c *Client) leftCluster(v *wire.View) bool {
	from := c.moveFrom.Load()
	if from == nil {
		return false
	}
	for _, n := range v.Nodes {
		if (*from)[n.Addr] {
			return true
		}
	}
	return false
}

// resolveMove finds the cluster the namespace moved to, when a MOVED asked
// for it: it reads the view from the configured Registry addresses, which
// name the namespace's cluster once the move is recorded, and from the
// MOVED answer's addresses when the registry still names the old cluster
// (or none answers). A view of another cluster than the current one is
// installed whatever its version (a cluster's view versions say nothing
// of another's), the old cluster's views are ignored from then on, and the
// subscription moves to the new cluster; blocked acquires and watches are
// then sent again there, as after a master change. It returns an error
// when no address gave a view of another cluster (the refresh is tried
// again with backoff).
func (c *Client) resolveMove() error {
	note := c.moveSeeds.Load()
	if note == nil {
		return nil
	}
	cur := c.view.Load()
	from := make(map[string]bool)
	if cur != nil {
		for _, n := range cur.Nodes {
			from[n.Addr] = true
		}
	}
	if !from[note.by] {
		// Answered by a node of a cluster followed away from already.
		c.moveSeeds.CompareAndSwap(note, nil)
		return nil
	}
	var errs []error
	for _, addr := range append(append([]string(nil), c.cfg.Registry...), note.seeds...) {
		if from[addr] {
			continue // a node of the old cluster
		}
		v, err := c.viewAt(addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		other := true
		for _, n := range v.Nodes {
			if from[n.Addr] {
				other = false
			}
		}
		if !other || len(v.Groups) == 0 {
			continue // the registry still names the old cluster
		}
		c.moveFrom.Store(&from)
		c.moveSeeds.CompareAndSwap(note, nil)
		c.mu.Lock()
		c.subConn = nil // subscribed to the old cluster: refreshOnce subscribes anew
		c.mu.Unlock()
		c.installView(v, true)
		c.log.Info("paxlock: the namespace moved to another cluster; following it", "via", addr, "nodes", len(v.Nodes))
		return nil
	}
	return fmt.Errorf("%w: no registry or MOVED address gave the namespace's new cluster (%d tried)", ErrMoving, len(errs))
}

// viewAt reads the view from addr.
func (c *Client) viewAt(addr string) (*wire.View, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout+c.cfg.RequestTimeout)
	defer cancel()
	cn, err := c.getConn(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c.fetchView(ctx, cn, wire.TypeGetView)
}
