package apiserver

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/wire"
)

// lossBuffer is how many losses a Holds stream keeps for a caller slow to
// take them; past it the stream ends RESOURCE_EXHAUSTED, so that a loss
// is never dropped while the stream goes on.
const lossBuffer = 64

// lossSink is where the Lost pushes of one owner go, for one Holds
// stream. overflowed is set (under the session's lock) when the stream
// fell lossBuffer losses behind; ch is closed then.
type lossSink struct {
	owner      wire.Owner
	ch         chan wire.Lost
	overflowed bool
}

// addLoss records a Holds stream of owner o.
func (ss *nsSession) addLoss(o wire.Owner) (uint64, *lossSink) {
	l := &lossSink{owner: o, ch: make(chan wire.Lost, lossBuffer)}
	ss.sc.Lock()
	ss.nextLoss++
	id := ss.nextLoss
	ss.losses[id] = l
	ss.sc.Unlock()
	return id, l
}

// dropLoss forgets Holds stream id.
func (ss *nsSession) dropLoss(id uint64) {
	ss.sc.Lock()
	delete(ss.losses, id)
	ss.sc.Unlock()
}

// lostLocked hands a Lost push to every Holds stream of its owner. The
// session's lock is held.
func (ss *nsSession) lostLocked(m *wire.Lost) {
	if m.Owner.Client != ss.client {
		return
	}
	for _, l := range ss.losses {
		if l.owner != m.Owner || l.overflowed {
			continue
		}
		select {
		case l.ch <- *m:
		default:
			l.overflowed = true
			close(l.ch)
		}
	}
}

// Holds implements paxlockv1connect.LockServiceHandler: the Lost pushes
// that the keys' masters send this node's session for the caller's
// owner, as they come, until the call ends or max_wait_ms runs out.
func (s *Service) Holds(ctx context.Context, req *connect.Request[paxlockv1.HoldsRequest], stream *connect.ServerStream[paxlockv1.HoldEvent]) error {
	q := req.Msg
	if q.Owner == "" {
		return invalid("holds: owner is empty")
	}
	ss, err := s.open(ctx)
	if err != nil {
		return err
	}
	id, sink := ss.addLoss(ownerOf(ss.client, q.Owner))
	defer ss.dropLoss(id)
	var timeout <-chan time.Time
	if q.MaxWaitMs > 0 {
		t := time.NewTimer(time.Duration(q.MaxWaitMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	// The headers go now: once the caller has them, every later loss of
	// its holds that reaches this node is on the stream.
	if err := stream.Send(nil); err != nil {
		return err
	}
	for {
		select {
		case m, ok := <-sink.ch:
			if !ok {
				return apiError(connect.CodeResourceExhausted, wire.StatusOverloaded.String(), errors.New("holds: the stream fell behind its losses"))
			}
			if err := stream.Send(&paxlockv1.HoldEvent{Key: m.Key, Token: m.Token, Kind: eventKind(m.Event)}); err != nil {
				return err
			}
		case <-timeout:
			return stream.Send(&paxlockv1.HoldEvent{Kind: paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT})
		case <-ss.sc.Done():
			return connect.NewError(connect.CodeUnavailable, errors.New("holds: the node's session ended; its holds' losses may have been missed: check them (State)"))
		case <-ctx.Done():
			return nil
		}
	}
}
