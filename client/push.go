// This file handles the server's pushes: grants, losses, watch events and
// cluster views.

package client

import (
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// onPush handles a server push; it runs on a connection's reader and never
// blocks.
func (c *Client) onPush(cn *conn, m wire.Message) {
	switch p := m.(type) {
	case *wire.Granted:
		c.onGranted(p)
	case *wire.Lost:
		c.onLost(p)
	case *wire.WatchEvent:
		c.onWatchEvent(cn, p)
	case *wire.View:
		if len(p.Groups) > 0 {
			c.updateView(p)
		}
	}
}

func (c *Client) onLost(p *wire.Lost) {
	if p.Owner.Client != c.id {
		return
	}
	c.mu.Lock()
	h := c.holds[holdKey{key: p.Key, token: p.Token, owner: p.Owner.ID}]
	c.mu.Unlock()
	if h == nil {
		return
	}
	cause := ErrLockLost
	if p.Event == wire.EventHoldLimit {
		cause = ErrHoldLimit
	}
	err := fmt.Errorf("%w: %q (token %d): server says %s", cause, p.Key, p.Token, p.Event)
	if p.Event == wire.EventRevoked {
		h.revoked(err)
		return
	}
	h.markLost(err, false)
}

func (c *Client) onGranted(g *wire.Granted) {
	if g.Owner.Client != c.id {
		return
	}
	c.mu.Lock()
	w := c.waits[g.WaitID]
	if w == nil {
		c.mu.Unlock()
		c.log.Debug("paxlock: grant for unknown wait", "wait", g.WaitID, "key", g.Key, "status", g.Status)
		return
	}
	if w.abandoned {
		delete(c.waits, g.WaitID)
		c.mu.Unlock()
		if g.Status != wire.StatusSuccess || !c.goClean(func() { w.state.releaseOrphan(w, g.Token) }) {
			c.unrefOwnerLock(w.state)
		}
		return
	}
	c.mu.Unlock()
	switch g.Status {
	case wire.StatusNoMaster, wire.StatusMoving, wire.StatusMoved:
		// The wait left the queue (a master change, a namespace move):
		// its Lock re-sends it to whichever master a fresh view names.
		c.refreshWide()
	}
	w.deliver(waitOutcome{status: g.Status, token: g.Token, ttlMs: g.TTLMs})
}
