package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// Every node records, in its data directory, the incarnation (data
// directory) of every peer it admitted a connection from, before it
// reads a message on that connection, and refuses another incarnation
// under that id from then on. The member list records incarnations too,
// but only once group 0 has a master and that master heard from the
// node: a seed node wiped and restarted during bootstrap would pass the
// list's check. Peer connections carry messages one way (the dialer
// writes), so a node that took any message from a peer's earlier data
// directory (a promise, an accepted value) has that directory's
// incarnation on disk, and refuses the peer's new one.

// peersFile is the file in the data directory that holds the peers'
// incarnations.
const peersFile = "PEERS"

// peerIncarnations is the record of the peers' incarnations.
type peerIncarnations struct {
	dir string
	log *slog.Logger
	mu  sync.Mutex
	inc map[paxos.NodeID]uint64 // replaced, never modified
}

// peersRecord is peersFile's content.
type peersRecord struct {
	Incarnations map[uint32]uint64 `json:"incarnations"`
}

// openPeerIncarnations loads dir's record (none: empty).
func openPeerIncarnations(dir string, log *slog.Logger) (*peerIncarnations, error) {
	p := &peerIncarnations{dir: dir, log: log, inc: map[paxos.NodeID]uint64{}}
	path := filepath.Join(dir, peersFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("server: read %s: %w", path, err)
	}
	var rec peersRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("server: %s is damaged: %w", path, err)
	}
	for id, inc := range rec.Incarnations {
		p.inc[paxos.NodeID(id)] = inc
	}
	return p, nil
}

// get returns the incarnation recorded for peer id.
func (p *peerIncarnations) get(id paxos.NodeID) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	inc, ok := p.inc[id]
	return inc, ok
}

// admit records inc as peer id's incarnation when none is recorded (on
// disk before it returns), and fails with an error matching
// group.ErrIncarnation when another one is. A failed write is
// logged and the incarnation kept in memory: refusing would stop a
// healthy peer for this node's disk.
func (p *peerIncarnations) admit(id paxos.NodeID, inc uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.inc[id]; ok {
		if old != inc {
			return fmt.Errorf("node %d presents data directory %016x, this node has talked to it with %016x: %w", id, inc, old, group.ErrIncarnation)
		}
		return nil
	}
	next := maps.Clone(p.inc)
	next[id] = inc
	rec := peersRecord{Incarnations: map[uint32]uint64{}}
	for k, v := range next {
		rec.Incarnations[uint32(k)] = v
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = writeFileAtomic(p.dir, peersFile, append(b, '\n'))
	}
	if err != nil {
		p.log.Error("recording a peer's data directory (incarnation)", "peer", id, "err", err)
	}
	p.inc = next
	return nil
}
