package host

import (
	"context"
	"errors"
	"fmt"
	"github.com/paxlock/paxlock/paxos"
	"sync"
)

// ErrNoImage is returned by OpenImage when this replica has no state to
// give: it waits for a snapshot (or is installing one), or it stopped.
var ErrNoImage = errors.New("paxos: replica has no consistent image to give")

// OpenImage opens a consistent image of the group's state-machine keyspace
// exactly at the instance this replica has applied, for a backup. It runs
// on the host's loop, between rounds: a Checkpointer state machine that
// applied past its last checkpoint is checkpointed first (a write that
// needs no sync of its own: the log above the previous checkpoint stays),
// so that the image reflects every applied instance and nothing later —
// the keyspace alone would be the last checkpoint plus the write-through
// changes of later instances. SnapshotSource.Applied is the image's
// instance. Close the source when done: an open image pins old data.
//
// ctx bounds the wait for the loop; an image opened after ctx ended is
// closed, not leaked.
func (g *Replica) OpenImage(ctx context.Context) (paxos.SnapshotSource, error) {
	if g.isClosed() {
		return nil, fmt.Errorf("paxos: group %d image: %w", g.id, paxos.ErrStopped)
	}
	type opened struct {
		src paxos.SnapshotSource
		err error
	}
	ch := make(chan opened, 1)
	var mu sync.Mutex
	abandoned := false
	g.control(func(*paxos.Core) {
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			return
		}
		src, err := g.openImage()
		ch <- opened{src, err}
	})
	select {
	case o := <-ch:
		return o.src, o.err
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		mu.Unlock()
		select {
		case o := <-ch: // it ran before abandoned was set
			if o.src != nil {
				_ = o.src.Close() // a read-only view, unused
			}
		default:
		}
		return nil, fmt.Errorf("paxos: group %d image: %w", g.id, ctx.Err())
	}
}

// openImage checkpoints and opens the image; on the host's loop only.
func (g *Replica) openImage() (paxos.SnapshotSource, error) {
	if g.halted || g.install != nil || g.core.NeedsSnapshot() {
		return nil, fmt.Errorf("paxos: group %d image: %w", g.id, ErrNoImage)
	}
	if g.ckpt != nil && g.core.AppliedIndex() > g.checkpointed {
		b := g.store.NewBatch()
		g.checkpoint(b, g.core.AppliedIndex())
		err := b.Commit(false)
		b.Close()
		if err != nil {
			return nil, fmt.Errorf("paxos: group %d image checkpoint: %w", g.id, err)
		}
	}
	return g.store.OpenSnapshot(g.id, g.cfg.SnapshotChunk)
}
