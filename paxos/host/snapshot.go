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
		if in != nil {
			if in.from == m.From && in.applied == m.Instance {
				ack() // a duplicate first chunk
				return
			}
			_ = in.si.Abort()
		}
		si, err := g.store.BeginInstall(g.id)
		if err != nil {
			g.log.Error("paxos: begin snapshot install", "group", g.id, "err", err)
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
		g.log.Error("paxos: snapshot chunk", "group", g.id, "from", m.From, "err", err)
		_ = in.si.Abort()
		g.install = nil
		return
	}
	in.next++
	g.snapRecvBytes.Add(uint64(len(m.Chunk)))
	if m.LastChunk {
		if err := in.si.Finish(in.applied); err != nil {
			g.log.Error("paxos: finish snapshot install", "group", g.id, "err", err)
			g.install = nil
			return
		}
		g.install = nil
		if err := g.sm.Load(g.store.SMReader(g.id), in.applied); err != nil {
			g.log.Error("paxos: load installed snapshot", "group", g.id, "err", err)
			return
		}
		g.checkpointed = in.applied
		mem, err := loadMembership(g.store.SMReader(g.id))
		if err != nil {
			g.log.Error("paxos: load installed snapshot's member set", "group", g.id, "err", err)
			return
		}
		g.mem, g.memDirty = mem, false
		g.core.SnapshotInstalled(in.applied, mem)
		g.snapInstalled.Add(1)
		g.log.Info("paxos: installed snapshot", "group", g.id, "from", m.From, "applied", in.applied)
	}
	ack()
}
