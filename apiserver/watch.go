package apiserver

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// Watch implements paxlockv1connect.LockServiceHandler: a native watch
// registered on the key's master over the namespace's session, its
// events pushed to the stream as they come, dropped (Unwatch) when the
// call ends.
func (s *Service) Watch(ctx context.Context, req *connect.Request[paxlockv1.WatchRequest], stream *connect.ServerStream[paxlockv1.WatchEvent]) error {
	ss, err := s.open(ctx, req.Msg.Key, useWatch)
	if err != nil {
		return err
	}
	defer ss.giveBack(useWatch)
	q := req.Msg
	id, sink := ss.addWatch()
	defer ss.dropWatch(id)
	m := &wire.Watch{Key: q.Key, WatchID: id, Token: q.Token, MaxWaitMs: q.MaxWaitMs}
	if q.Continuous {
		m.Flags = wire.FlagContinuous
	}
	if err := m.Validate(); err != nil {
		return invalid("watch: " + err.Error())
	}
	deadline := time.Now().Add(time.Duration(q.MaxWaitMs) * time.Millisecond)
	if err := s.register(ctx, ss, sink, m); err != nil {
		return err
	}
	defer s.unwatch(ss, &wire.Unwatch{Key: q.Key, WatchID: id})
	// The headers go now, so that a caller knows the watch is registered
	// before its first event.
	if err := stream.Send(nil); err != nil {
		return err
	}
	for {
		select {
		case ev, ok := <-sink.ch:
			if !ok {
				return apiError(connect.CodeResourceExhausted, wire.StatusOverloaded.String(), errors.New("watch: the stream fell behind its events"))
			}
			if err := stream.Send(watchEvent(&ev)); err != nil {
				return err
			}
			if !q.Continuous || ev.Event == wire.EventTimeout {
				return nil
			}
			m.Token = max(m.Token, ev.Token)
		case <-sink.rewatch:
			// The master changed: the watch is gone with the old one's
			// memory. Register it again from the last token reported,
			// for what is left of max_wait_ms.
			if q.MaxWaitMs > 0 {
				m.MaxWaitMs = uint32(max(time.Until(deadline), time.Millisecond) / time.Millisecond)
			}
			if err := s.register(ctx, ss, sink, m); err != nil {
				return err
			}
		case <-ss.sc.Done():
			return connect.NewError(connect.CodeUnavailable, errors.New("watch: the node's session ended; watch again from the last token"))
		case <-ctx.Done():
			return nil
		}
	}
}

// register registers watch m (its sink) on the master of its key's
// group.
func (s *Service) register(ctx context.Context, ss *nsSession, sink *watchSink, m *wire.Watch) error {
	ss.registering(sink, m)
	r, err := s.routed(ctx, ss, wire.TypeWatch, m)
	if err != nil {
		return err
	}
	if r.Status != wire.StatusSuccess {
		return statusError("watch", m.Key, r)
	}
	return nil
}

// unwatch drops watches ms from their masters, in the background (the
// caller is gone, or its watch ended).
func (s *Service) unwatch(ss *nsSession, ms ...*wire.Unwatch) {
	go func() {
		ctx, cancel := context.WithTimeout(s.life, 5*time.Second)
		defer cancel()
		for _, m := range ms {
			_, _ = s.routed(ctx, ss, wire.TypeUnwatch, m)
		}
	}()
}
