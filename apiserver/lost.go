package apiserver

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// lossBuffer is how many losses a Holds stream keeps for a caller slow to
// take them; past it the stream ends RESOURCE_EXHAUSTED, so that a loss
// is never dropped while the stream goes on.
const lossBuffer = 64

// nsHolds are one namespace's Holds streams on this node. A Lost push
// may come over any of the namespace's sessions (a hold's master pushes
// it to the connection it knows of its owner's client), so the streams
// are the namespace's, not a session's; when any session ends, every
// stream open then ends too, since a loss pushed to it may be missed.
type nsHolds struct {
	mu    sync.Mutex
	next  uint64
	sinks map[uint64]*lossSink
}

// lossSink is where the Lost pushes of one owner go, for one Holds
// stream. overflowed is set (under nsHolds.mu) when the stream fell
// lossBuffer losses behind; ch is closed then. ended is closed when a
// session of the namespace ended while the stream was open.
type lossSink struct {
	owner      wire.Owner
	ch         chan wire.Lost
	overflowed bool
	ended      chan struct{}
	gone       bool // ended is closed
}

// newHolds returns a namespace's Holds streams, none yet.
func newHolds() *nsHolds { return &nsHolds{sinks: make(map[uint64]*lossSink)} }

// add records a Holds stream of owner o.
func (h *nsHolds) add(o wire.Owner) (uint64, *lossSink) {
	l := &lossSink{owner: o, ch: make(chan wire.Lost, lossBuffer), ended: make(chan struct{})}
	h.mu.Lock()
	h.next++
	id := h.next
	h.sinks[id] = l
	h.mu.Unlock()
	return id, l
}

// drop forgets Holds stream id.
func (h *nsHolds) drop(id uint64) {
	h.mu.Lock()
	delete(h.sinks, id)
	h.mu.Unlock()
}

// lost hands a Lost push to every Holds stream of its owner.
func (h *nsHolds) lost(m *wire.Lost) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.sinks {
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

// sessionEnded ends the streams open now: a session of the namespace
// ended, and a loss pushed to it may be missed.
func (h *nsHolds) sessionEnded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.sinks {
		if !l.gone {
			l.gone = true
			close(l.ended)
		}
	}
}

// Holds implements paxlockv1connect.LockServiceHandler: the Lost pushes
// that the keys' masters send this node's sessions of the namespace for
// the caller's owner, as they come, until the call ends or max_wait_ms runs out.
func (s *Service) Holds(ctx context.Context, req *connect.Request[paxlockv1.HoldsRequest], stream *connect.ServerStream[paxlockv1.HoldEvent]) error {
	q := req.Msg
	if q.Owner == "" {
		return invalid("holds: owner is empty")
	}
	ss, err := s.open(ctx, "", useCall)
	if err != nil {
		return err
	}
	id, sink := ss.holds.add(ownerOf(ss.client, q.Owner))
	defer ss.holds.drop(id)
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
			if err := stream.Send(&paxlockv1.HoldEvent{Key: m.Key, Token: m.Token, Kind: eventKind(m.Event), MaxHold: maxHold(m.Event)}); err != nil {
				return err
			}
		case <-timeout:
			return stream.Send(&paxlockv1.HoldEvent{Kind: paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT})
		case <-sink.ended:
			return connect.NewError(connect.CodeUnavailable, errors.New("holds: a session of the namespace into the node ended; its holds' losses may have been missed: check them (State)"))
		case <-ctx.Done():
			return nil
		}
	}
}
