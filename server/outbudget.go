package server

import (
	"sync"
	"sync/atomic"
)

// The node-wide budget for queued output (max_output_total). Each client
// connection, of either engine, charges the node with the output it holds
// that its client has not read: its unsent frames (conn.out), a burst
// handed to gnet's AsyncWrite and not yet written (flightLen), and what
// the transport still holds (conn.queued: gnet's outbound buffer as last
// seen on the event loop, or the goroutine writer's write under way).
// The charge follows every change of those (accountLocked) and is
// returned when the connection closes or is closed as a slow consumer
// (releaseOutput), so that outputBudget.queued is the sum over the open
// connections, and 0 once none is open (paxlock_output_queued_bytes).
//
// When a frame queued takes the node past the budget, the connections
// with the most output queued beyond their fair share (the budget over
// the open connections) are closed as slow consumers, largest first,
// until the node is within it (paxlock_output_budget_closes_total): a
// reply is never dropped from a connection that stays open, and a
// connection that reads its replies, holding a reply or two, is never
// above its share while a connection that does not read holds more.

// outputBudget is the node's queued output and its enforcement.
type outputBudget struct {
	mu     sync.Mutex // serializes enforcement: one pass closes what is needed
	queued atomic.Int64
	closes atomic.Uint64 // connections closed over the budget
}

// accountLocked brings the node's charge for c to what c holds now; c.mu
// is held. It reports whether the charge grew and the node is now past
// its budget (the caller then calls enforceOutputBudget, without c.mu).
func (c *conn) accountLocked() bool {
	if c.released {
		return false
	}
	now := int64(len(c.out)+c.flightLen) + c.queued.Load()
	d := now - c.charged.Load()
	if d == 0 {
		return false
	}
	c.charged.Store(now)
	total := c.s.outBudget.queued.Add(d)
	return d > 0 && total > c.s.cfg.MaxOutputTotal
}

// releaseOutput returns c's charge, once: c closed, or is closing and
// sends nothing more. What it had queued is dropped with it.
func (c *conn) releaseOutput() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return
	}
	c.released = true
	c.s.outBudget.queued.Add(-c.charged.Swap(0))
	c.out = nil
}

// enforceOutputBudget closes, while the node's queued output is past
// max_output_total, the connection holding the most of it if that is
// more than its fair share. Called without any conn's mu.
func (s *Server) enforceOutputBudget() {
	b := &s.outBudget
	b.mu.Lock()
	defer b.mu.Unlock()
	budget := s.cfg.MaxOutputTotal
	for {
		total := b.queued.Load()
		if total <= budget {
			return
		}
		fair := budget / max(s.nconns.Load(), 1)
		var victim *conn
		var most int64
		s.conns.Range(func(k, _ any) bool {
			if o := k.(*conn); o.charged.Load() > most {
				victim, most = o, o.charged.Load()
			}
			return true
		})
		if victim == nil || most <= fair {
			return
		}
		if !victim.slow.CompareAndSwap(false, true) {
			victim.releaseOutput() // closing already: its charge goes now
			continue
		}
		victim.closed.Store(true)
		s.stats.slowConsumers.Add(1)
		b.closes.Add(1)
		s.log.Warn("closing client connection: slow consumer, the node's output budget (max_output_total) is spent",
			"remote", victim.remote(), "queued", most, "fair_share", fair, "node_queued", total, "max_output_total", budget)
		victim.releaseOutput()
		victim.closeConn()
	}
}
