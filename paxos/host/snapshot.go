package host

import (
	"fmt"
	"github.com/paxlock/paxlock/paxos"
	"time"
)

// replicaLog is one replica's view of the shared storage's log: the
// LogReader its core reads old entries through.
type replicaLog struct {
	s paxos.Storage
	g paxos.GroupID
}

func (l replicaLog) Entries(from, to uint64, maxBytes int) ([]paxos.Entry, error) {
	return l.s.Entries(l.g, from, to, maxBytes)
}

// startStream streams a snapshot of the group to peer p, one chunk at a
// time, each acknowledged before the next (the transport may drop).
func (g *Replica) startStream(p paxos.NodeID) {
	g.mu.Lock()
	if g.streams[p] != nil || g.closed.Load() {
		g.mu.Unlock()
		return
	}
	acks := make(chan uint64, 4)
	g.streams[p] = acks
	g.mu.Unlock()
	go func() {
		defer func() {
			g.mu.Lock()
			delete(g.streams, p)
			g.mu.Unlock()
		}()
		if err := g.stream(p, acks); err != nil {
			g.log.Warn("paxos: snapshot stream failed", "group", g.id, "to", p, "err", err)
		}
	}()
}

func (g *Replica) stream(p paxos.NodeID, acks chan uint64) error {
	src, err := g.store.OpenSnapshot(g.id, g.cfg.SnapshotChunk)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }() // a read-only view: closing it fails only when closed twice
	g.log.Info("paxos: streaming snapshot", "group", g.id, "to", p, "applied", src.Applied())
	for seq := uint64(0); ; seq++ {
		chunk, last, err := src.Next()
		if err != nil {
			return err
		}
		m := paxos.Message{Type: paxos.MsgSnapshot, Group: g.id, From: g.host.cfg.Self, To: p, Instance: src.Applied(), ChunkSeq: seq, LastChunk: last, Chunk: append([]byte(nil), chunk...)}
		acked := false
		for try := 0; try < 5 && !acked; try++ {
			g.host.send([]paxos.Message{m})
			expired := make(chan struct{})
			timer := g.host.clock.AfterFunc(2*time.Second, func() { close(expired) })
		wait:
			for {
				select {
				case a, ok := <-acks:
					if !ok {
						timer.Stop()
						return paxos.ErrStopped
					}
					if a == seq {
						acked = true
						break wait
					}
				case <-expired:
					break wait
				case <-g.host.stop:
					timer.Stop()
					return paxos.ErrStopped
				}
			}
			timer.Stop()
		}
		if !acked {
			return fmt.Errorf("paxos: snapshot chunk %d not acknowledged", seq)
		}
		g.snapSentBytes.Add(uint64(len(m.Chunk)))
		if last {
			g.snapSent.Add(1)
			return nil
		}
	}
}

// onSnapshotMsg handles snapshot chunks and their acknowledgements on the
// host's loop.
func (g *Replica) onSnapshotMsg(m *paxos.Message) {
	if m.ChunkAck { // an acknowledgement for a stream of ours
		g.mu.Lock()
		ch := g.streams[m.From]
		g.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m.ChunkSeq:
			default:
			}
		}
		return
	}
	ack := func() {
		g.host.send([]paxos.Message{{Type: paxos.MsgSnapshot, Group: g.id, From: g.host.cfg.Self, To: m.From, Instance: m.Instance, ChunkSeq: m.ChunkSeq, ChunkAck: true}})
	}
	in := g.install
	if m.ChunkSeq == 0 {
		if m.Instance < g.core.LogStart()-1 || (m.Instance <= g.core.AppliedIndex() && !g.core.NeedsSnapshot()) {
			// Not useful; acknowledge every chunk so the sender finishes.
			ack()
			return
		}
		if !g.core.WantsSnapshot(m.From, m.Instance) {
			// Not asked for, or not from the peer asked: installing it
			// would clear the keyspace for a stream nobody wanted.
			g.refusals[paxos.RefusedSnapshot].Add(1)
			g.logRefusal(m.From)
			return
		}
		if in != nil {
			if in.from == m.From && in.applied == m.Instance {
				ack() // a duplicate first chunk
				return
			}
			_ = in.si.Abort()
		}
		si, err := g.store.BeginInstall(g.id)
		if err != nil {
			g.failStop(fmt.Errorf("paxos: group %d: begin snapshot install: %w", g.id, err))
			return
		}
		in = &snapInstall{from: m.From, applied: m.Instance, si: si}
		g.install = in
	}
	if in == nil || in.from != m.From || in.applied != m.Instance {
		if in == nil && m.Instance <= g.core.AppliedIndex() {
			ack()
		}
		return
	}
	if m.ChunkSeq < in.next {
		ack() // duplicate
		return
	}
	if m.ChunkSeq > in.next {
		return
	}
	if err := in.si.AddChunk(m.Chunk); err != nil {
		// The keyspace is cleared and half written: the replica stops
		// rather than apply onto it (a restart finds the install
		// unfinished and fetches a snapshot again).
		_ = in.si.Abort()
		g.install = nil
		g.failStop(fmt.Errorf("paxos: group %d: snapshot chunk %d from %d: %w", g.id, m.ChunkSeq, m.From, err))
		return
	}
	in.next++
	g.snapRecvBytes.Add(uint64(len(m.Chunk)))
	if m.LastChunk {
		if err := in.si.Finish(in.applied); err != nil {
			g.install = nil
			g.failStop(fmt.Errorf("paxos: group %d: finish snapshot install: %w", g.id, err))
			return
		}
		g.install = nil
		// A state machine that failed to load the installed keyspace
		// holds partial state: the replica stops instead of serving it.
		if err := g.sm.Load(g.store.SMReader(g.id), in.applied); err != nil {
			g.failStop(fmt.Errorf("paxos: group %d: load installed snapshot: %w", g.id, err))
			return
		}
		g.checkpointed = in.applied
		mem, err := loadMembership(g.store.SMReader(g.id))
		if err != nil {
			g.failStop(fmt.Errorf("paxos: group %d: load installed snapshot's member set: %w", g.id, err))
			return
		}
		g.mem, g.memDirty = mem, false
		g.core.SnapshotInstalled(in.applied, mem)
		g.snapInstalled.Add(1)
		g.log.Info("paxos: installed snapshot", "group", g.id, "from", m.From, "applied", in.applied)
	}
	ack()
}

// failStop stops this group for good after its snapshot install or the
// state machine's load of it failed, as a storage failure stops every
// group (stopOnStorage): its proposals fail with err (which matches
// ErrStopped), it reports no master and not serving, takes no more
// messages, and Err reports err. The node's other groups go on. It runs on
// the host's loop.
func (g *Replica) failStop(err error) {
	if g.halted {
		return
	}
	stop := fmt.Errorf("%w: %w", paxos.ErrStopped, err)
	g.failed.Store(&stop)
	g.log.Error("paxos: group stopped", "group", g.id, "err", err)
	g.stopOnStorage(stop)
}

// Err returns nil while the group runs, and once it stopped on a failure
// (its storage, a snapshot install or the load of one) the error its
// proposals get, which matches ErrStopped.
func (g *Replica) Err() error {
	if p := g.failed.Load(); p != nil {
		return *p
	}
	return g.host.Err()
}
