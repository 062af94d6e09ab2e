// This file is the client's side of a server-side wait: the waiter a
// blocking Lock registers and the pushes that end it.

package client

import (
	"github.com/paxlock/paxlock/wire"
)

// waiter is a blocking acquire queued on the server, found by its WaitID
// when the Granted push arrives.
type waiter struct {
	id     uint64
	core   *lockCore
	hash   uint64
	ch     chan grant    // cap 1: the outcome
	resend chan struct{} // cap 1: re-send the Acquire
	// Guarded by Client.mu:
	conn      *conn  // where the last LOCK_WAIT came from
	master    string // the master that queued it (conn's address unless relayed)
	abandoned bool   // its Lock call gave up but could not leave the queue
}

type grant struct {
	status wire.Status
	token  uint64
	ttlMs  uint32 // the TTL the master applied; 0 if the server did not say
}

func (w *waiter) signalResend() {
	select {
	case w.resend <- struct{}{}:
	default:
	}
}

// deliver hands the outcome over without blocking; a SUCCESS is never
// replaced by a later, stale outcome.
func (w *waiter) deliver(g grant) {
	for {
		select {
		case w.ch <- g:
			return
		default:
		}
		select {
		case old := <-w.ch:
			if old.status == wire.StatusSuccess {
				g = old
			}
		default:
		}
	}
}

func (w *waiter) take() (grant, bool) {
	select {
	case g := <-w.ch:
		return g, true
	default:
		return grant{}, false
	}
}

func (c *Client) addWaiter(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.waits[w.id] = w
	if w.core.shared {
		w.core.refs++
	}
	return true
}

func (c *Client) removeWaiter(w *waiter) {
	c.mu.Lock()
	_, ok := c.waits[w.id]
	delete(c.waits, w.id)
	c.mu.Unlock()
	if ok {
		c.unrefCore(w.core)
	}
}

func (c *Client) setWaiterConn(w *waiter, cn *conn, master string) {
	c.mu.Lock()
	w.conn, w.master = cn, master
	c.mu.Unlock()
}

// movedSince reports whether the current view, compared with before (the
// view when a wait or watch was sent), names another master than addr for
// hash's group or a new term of it (see newTerm). A view that arrived
// while the request was in flight is handled here, since updateView did
// not yet know where the request went.
func (c *Client) movedSince(before *wire.View, hash uint64, addr string) bool {
	v := c.view.Load()
	if v == nil || v == before {
		return false
	}
	return newTerm(before, v, wire.GroupOf(hash, len(v.Groups)), addr)
}
