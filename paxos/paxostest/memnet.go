package paxostest

import (
	"github.com/paxlock/paxlock/paxos"
	"sync"
)

// MemNetwork is an in-process network for tests of the layers above paxos:
// every node's transport delivers to the other nodes' handlers through a
// per-node queue drained by one goroutine, and links can be cut.
type MemNetwork struct {
	mu    sync.Mutex
	nodes map[paxos.NodeID]*MemEndpoint
	cut   map[[2]paxos.NodeID]bool
}

// MemEndpoint is one node's transport on a MemNetwork. Messages that
// arrive while it has no handler are dropped, as a network may drop them.
type MemEndpoint struct {
	net     *MemNetwork
	id      paxos.NodeID
	handler func([]paxos.Message)
	mu      sync.Mutex
	queue   []paxos.Message
	wake    chan struct{}
	done    chan struct{}
	closed  bool
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{nodes: map[paxos.NodeID]*MemEndpoint{}, cut: map[[2]paxos.NodeID]bool{}}
}

// Join attaches node id with its handler (nil: bound later with
// SetHandler) and returns its transport. A node that joins again replaces
// its old endpoint (a restart).
func (n *MemNetwork) Join(id paxos.NodeID, handler func([]paxos.Message)) *MemEndpoint {
	ep := &MemEndpoint{net: n, id: id, handler: handler, wake: make(chan struct{}, 1), done: make(chan struct{})}
	n.mu.Lock()
	if old := n.nodes[id]; old != nil {
		old.shut()
	}
	n.nodes[id] = ep
	n.mu.Unlock()
	go ep.run()
	return ep
}

// Cut stops traffic both ways between a and b; Heal restores every link.
func (n *MemNetwork) Cut(a, b paxos.NodeID) {
	n.mu.Lock()
	n.cut[[2]paxos.NodeID{a, b}] = true
	n.cut[[2]paxos.NodeID{b, a}] = true
	n.mu.Unlock()
}

// Isolate cuts a from every other node.
func (n *MemNetwork) Isolate(a paxos.NodeID) {
	n.mu.Lock()
	for id := range n.nodes {
		if id != a {
			n.cut[[2]paxos.NodeID{a, id}] = true
			n.cut[[2]paxos.NodeID{id, a}] = true
		}
	}
	n.mu.Unlock()
}

// Heal restores every link.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	clear(n.cut)
	n.mu.Unlock()
}

// Send implements Transport.
func (ep *MemEndpoint) Send(msgs []paxos.Message) {
	n := ep.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes[ep.id] != ep {
		return // a stale endpoint of a restarted node
	}
	for _, m := range msgs {
		if n.cut[[2]paxos.NodeID{m.From, m.To}] {
			continue
		}
		if dst := n.nodes[m.To]; dst != nil {
			dst.enqueue(m)
		}
	}
}

// SetHandler binds the handler ep's received messages go to (a Host's
// Deliver, once the host exists: the host takes ep in its config).
func (ep *MemEndpoint) SetHandler(handler func([]paxos.Message)) {
	ep.mu.Lock()
	ep.handler = handler
	ep.mu.Unlock()
}

func (ep *MemEndpoint) enqueue(m paxos.Message) {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return
	}
	ep.queue = append(ep.queue, m)
	first := len(ep.queue) == 1
	ep.mu.Unlock()
	if first {
		select {
		case ep.wake <- struct{}{}:
		default:
		}
	}
}

func (ep *MemEndpoint) run() {
	defer close(ep.done)
	for range ep.wake {
		ep.mu.Lock()
		q := ep.queue
		ep.queue = nil
		closed := ep.closed
		handler := ep.handler
		ep.mu.Unlock()
		if closed {
			return
		}
		if len(q) > 0 && handler != nil {
			handler(q)
		}
	}
}

func (ep *MemEndpoint) shut() {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return
	}
	ep.closed = true
	ep.mu.Unlock()
	select {
	case ep.wake <- struct{}{}:
	default:
	}
}

// Close implements Transport: the node leaves the network.
func (ep *MemEndpoint) Close() error {
	n := ep.net
	n.mu.Lock()
	if n.nodes[ep.id] == ep {
		delete(n.nodes, ep.id)
	}
	n.mu.Unlock()
	ep.shut()
	<-ep.done
	return nil
}
