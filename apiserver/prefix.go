package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// prefixEvent is what one part of a prefix watch hands the stream: an
// event to send, or the error that ends the stream.
type prefixEvent struct {
	ev  *paxlockv1.WatchEvent
	err error
}

// WatchPrefix implements paxlockv1connect.LockServiceHandler: a native
// prefix watch (wire.FlagPrefix) registered with the master of every lock
// group over one of the namespace's sessions (the node forwards each
// group's part to that group's master, wire.ForwardNow), the parts'
// events merged onto the stream as they come, the parts dropped
// (Unwatch) when the call ends. The masters bound the parts as they bound
// a native client's (per connection: the session, which the lane counts
// as taking one place per group, usePrefix; per namespace): a
// registration refused OVERLOADED ends the call RESOURCE_EXHAUSTED with
// no part kept. A part whose group's master changes registers again with
// the next one, and the stream says RESYNC: that group's changes made
// meanwhile were not reported.
func (s *Service) WatchPrefix(ctx context.Context, req *connect.Request[paxlockv1.WatchPrefixRequest], stream *connect.ServerStream[paxlockv1.WatchEvent]) error {
	q := req.Msg
	if len(q.Prefix) > wire.MaxKeyLen {
		return invalid(fmt.Sprintf("watch prefix: prefix of %d bytes, limit %d", len(q.Prefix), wire.MaxKeyLen))
	}
	ss, err := s.open(ctx, "", usePrefix)
	if err != nil {
		return err
	}
	defer ss.giveBack(usePrefix)
	ctx, cancel := context.WithCancel(withoutHints(ctx))
	defer cancel()
	parts := make([]*wire.Watch, ss.groups())
	sinks := make([]*watchSink, len(parts))
	for g := range parts {
		id, sink := ss.addWatch()
		defer ss.dropWatch(id)
		parts[g] = &wire.Watch{Key: q.Prefix, WatchID: id, Flags: wire.FlagPrefix | wire.FlagContinuous, Group: uint32(g)}
		sinks[g] = sink
	}
	if err := parts[0].Validate(); err != nil {
		return invalid("watch prefix: " + err.Error())
	}
	// Every part is dropped at the end, registered or not: an Unwatch of
	// a watch the master does not keep is answered SUCCESS.
	defer s.unwatch(ss, unwatchesOf(parts)...)
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for g := range parts {
		wg.Go(func() { errs[g] = s.register(ctx, ss, sinks[g], parts[g]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	// The headers go now: once the caller has them, every later change
	// of a key under the prefix is on the stream (or a RESYNC says some
	// were missed).
	if err := stream.Send(nil); err != nil {
		return err
	}
	merged := make(chan prefixEvent)
	for g := range parts {
		go s.prefixPart(ctx, ss, sinks[g], parts[g], merged)
	}
	var timeout <-chan time.Time
	if q.MaxWaitMs > 0 {
		t := time.NewTimer(time.Duration(q.MaxWaitMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case pe := <-merged:
			if pe.err != nil {
				return pe.err
			}
			if err := stream.Send(pe.ev); err != nil {
				return err
			}
		case <-timeout:
			return stream.Send(&paxlockv1.WatchEvent{Key: q.Prefix, Kind: paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT})
		case <-ss.sc.Done():
			return connect.NewError(connect.CodeUnavailable, errors.New("watch prefix: the node's session ended; watch again (changes meanwhile are not reported)"))
		case <-ctx.Done():
			return nil
		}
	}
}

// prefixPart hands the events of part m of a prefix watch (its sink) to
// out until ctx ends: each event, a RESYNC after the part registered
// again with its group's next master, or the error that ends the stream
// (the sink fell behind, the registration failed).
func (s *Service) prefixPart(ctx context.Context, ss *nsSession, sink *watchSink, m *wire.Watch, out chan<- prefixEvent) {
	for {
		var pe prefixEvent
		select {
		case ev, ok := <-sink.ch:
			if !ok {
				pe.err = apiError(connect.CodeResourceExhausted, wire.StatusOverloaded.String(), errors.New("watch prefix: the stream fell behind its events"))
			} else {
				pe.ev = watchEvent(&ev)
			}
		case <-sink.rewatch:
			if err := s.register(ctx, ss, sink, m); err != nil {
				pe.err = err
			} else {
				pe.ev = &paxlockv1.WatchEvent{Key: m.Key, Kind: paxlockv1.WatchEventKind_WATCH_EVENT_KIND_RESYNC}
			}
		case <-ctx.Done():
			return
		}
		select {
		case out <- pe:
		case <-ctx.Done():
			return
		}
		if pe.err != nil {
			return
		}
	}
}

// unwatchesOf are the Unwatches of a prefix watch's parts.
func unwatchesOf(parts []*wire.Watch) []*wire.Unwatch {
	us := make([]*wire.Unwatch, len(parts))
	for i, m := range parts {
		us[i] = &wire.Unwatch{Key: m.Key, WatchID: m.WatchID, Flags: wire.FlagPrefix, Group: m.Group}
	}
	return us
}
