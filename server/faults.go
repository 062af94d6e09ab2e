package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/paxlock/paxlock/paxos"
)

// partition drops the Paxos traffic between this node and the peers it is
// told to cut off, in both directions, to test partitions across processes
// (make e2e) without network namespaces or root. Clients still reach the
// node, which is the case that matters for a lock service: a master cut off
// from its peers must stop granting once its lease runs out, while clients
// can still ask it. It sits between the Host and the TCP transport only
// when Config.FaultInjection is set, and is driven through the admin
// endpoint /debug/partition.
type partition struct {
	next    paxos.Transport
	deliver func([]paxos.Message)
	cut     atomic.Pointer[map[paxos.NodeID]bool]
}

// Send implements paxos.Transport: messages to cut-off peers are dropped.
func (p *partition) Send(msgs []paxos.Message) {
	if cut := p.cut.Load(); cut != nil && len(*cut) > 0 {
		msgs = slices.DeleteFunc(slices.Clone(msgs), func(m paxos.Message) bool { return (*cut)[m.To] })
	}
	p.next.Send(msgs)
}

// ErrNoFaultInjection is CutPeers' error on a node without
// Config.FaultInjection.
var ErrNoFaultInjection = errors.New("server: fault injection is off (Config.FaultInjection)")

// CutPeers drops the Paxos traffic between this node and the peers ids,
// both ways, replacing the set cut before; no ids heal. Clients still
// reach the node. It needs Config.FaultInjection, as /debug/partition
// does, which drives the same cut across processes.
func (s *Server) CutPeers(ids ...uint32) error {
	if s.faults == nil {
		return ErrNoFaultInjection
	}
	cut := map[paxos.NodeID]bool{}
	for _, id := range ids {
		cut[paxos.NodeID(id)] = true
	}
	s.faults.cut.Store(&cut)
	return nil
}

// Close implements paxos.Transport.
func (p *partition) Close() error { return p.next.Close() }

// Deliver passes on received messages, except those from cut-off peers.
func (p *partition) Deliver(msgs []paxos.Message) {
	if cut := p.cut.Load(); cut != nil && len(*cut) > 0 {
		msgs = slices.DeleteFunc(slices.Clone(msgs), func(m paxos.Message) bool { return (*cut)[m.From] })
	}
	if len(msgs) > 0 {
		p.deliver(msgs)
	}
}

// handle serves /debug/partition: GET lists the peers cut off; POST with
// the form value cut=2,3 cuts those peers off (replacing the set), and
// cut= heals.
func (p *partition) handle(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		cut := map[paxos.NodeID]bool{}
		for f := range strings.SplitSeq(r.FormValue("cut"), ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			id, err := strconv.ParseUint(f, 10, 32)
			if err != nil || id == 0 {
				http.Error(w, fmt.Sprintf("bad node id %q", f), http.StatusBadRequest)
				return
			}
			cut[paxos.NodeID(id)] = true
		}
		p.cut.Store(&cut)
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
		return
	}
	var ids []paxos.NodeID
	if cut := p.cut.Load(); cut != nil {
		ids = slices.Sorted(maps.Keys(*cut))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"cut": ids})
}

// errRelayFault ends the relays BreakRelays breaks.
var errRelayFault = errors.New("relay broken by fault injection")

// BreakRelays fails every relay to master of this node's client
// connections of namespace ns, as a broken connection to that master
// would (a relay that carried requests closes its client connection),
// and reports how many it broke. It needs Config.FaultInjection.
func (s *Server) BreakRelays(ns string, master uint32) (int, error) {
	if s.faults == nil {
		return 0, ErrNoFaultInjection
	}
	var broken []*relay
	s.conns.Range(func(k, _ any) bool {
		c := k.(*conn)
		c.relayMu.Lock()
		if r := c.relays[master]; r != nil && r.hello.Namespace == ns && !r.failed() {
			broken = append(broken, r)
		}
		c.relayMu.Unlock()
		return true
	})
	for _, r := range broken {
		r.fail(errRelayFault)
	}
	return len(broken), nil
}
