package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/paxlock/paxlock/client/wire"
)

// prefixWatchBuffer is the capacity of a prefix watch's channel. When it
// is full, events are dropped until the reader makes room, and the first
// event queued then is EventMoved (see prefixWatch.push).
const prefixWatchBuffer = 256

// prefixWatch is one WatchPrefix: a Watcher per lock group (its parts),
// each registered with its group's master, whose events are merged into
// ch.
type prefixWatch struct {
	prefix string
	cancel context.CancelFunc // ends the watch
	// started is set once WatchPrefix returned: a part registered after
	// it tells the user EventMoved (changes may have been missed).
	started atomic.Bool

	mu   sync.Mutex
	ch   chan Event
	done bool
	// missed is set when an event was dropped on a full channel: the
	// next event queued is EventMoved, so that the reader resynchronises.
	missed bool
}

// WatchPrefix reports the changes of every key of the client's namespace
// that starts with prefix ("" for the whole namespace): an event for
// each acquire (EventAcquired, with the holder, its token and value; a
// holder's SetValue or ReleasePermits is another EventAcquired with the
// same token), each
// release (EventReleased), expiry (EventExpired) and revocation
// (EventRevoked), with Event.Key naming the key. It reports changes from
// the registration on, not the present state: List(ctx, prefix, "", 0)
// after WatchPrefix returns gives that, and every change after it is
// reported.
//
// Keys hash to lock groups, so the watch registers with every group's
// master; a group's master keeps it in memory. The client registers it
// again with a group's next master after a master change, a reconnect
// or a namespace move, and then sends EventMoved (Key: the prefix):
// changes of that group's keys made while the watch was away were not
// reported (a watch registers from "now"), and a List of the prefix
// resynchronises. Events of one key come in order; events of keys of
// different groups are not ordered with respect to each other. When the
// caller reads too slowly and the channel (256 events) is full, the
// changes that follow are not queued until it has room, and the first
// event queued then is EventMoved: no change is missed without an
// EventMoved after it, and a List after that EventMoved includes every
// change that was not reported.
//
// The watch lasts until ctx ends (it is then dropped at every master and
// the channel closed) or the Client closes. A registration refused at
// once (beyond the server's bound on prefix watches: ErrOverloaded; a
// prefix longer than wire.MaxKeyLen) is returned as the error, and
// nothing is kept. It needs servers that know prefix watches
// (wire.FlagPrefix).
func (c *Client) WatchPrefix(ctx context.Context, prefix string) (<-chan Event, error) {
	if c == nil {
		return nil, invalid("nil *Client")
	}
	if len(prefix) > wire.MaxKeyLen {
		return nil, invalid("watch prefix: %d bytes, limit %d", len(prefix), wire.MaxKeyLen)
	}
	groups := wire.DefaultGroups
	if v := c.View(); v != nil && len(v.Groups) > 0 {
		groups = len(v.Groups)
	}
	wctx, cancel := context.WithCancel(ctx)
	pw := &prefixWatch{prefix: prefix, cancel: cancel, ch: make(chan Event, prefixWatchBuffer)}
	parts := make([]*Watcher, groups)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	for g := range parts {
		w := &Watcher{c: c, id: c.nextWatch.Add(1), key: prefix, hash: uint64(g), continuous: true, ch: make(chan Event), pfx: pw}
		c.watches[w.id] = w
		parts[g] = w
	}
	c.mu.Unlock()
	go func() {
		<-wctx.Done()
		for _, w := range parts {
			_ = w.Close()
		}
		pw.end()
	}()
	errs := make([]error, groups)
	var wg sync.WaitGroup
	for g, w := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = w.register(wctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, errRetry) {
			cancel()
			return nil, err
		}
	}
	pw.started.Store(true)
	for g, w := range parts {
		if errors.Is(errs[g], errRetry) {
			w.reregister()
		}
	}
	return pw.ch, nil
}

// registered is called when part w was registered with its group's
// master: after WatchPrefix returned, it tells the user EventMoved.
func (pw *prefixWatch) registered(*Watcher) {
	if pw.started.Load() {
		pw.push(Event{Key: pw.prefix, Type: EventMoved})
	}
}

// push queues ev without blocking. On a full channel it drops ev and
// marks the watch missed; the next push that finds room queues
// EventMoved (Key: the prefix) first, and ev after it when there is
// room for both. The reader therefore meets an EventMoved after the
// last event it was given before any change it was not given, and a
// List it runs on reading that EventMoved sees those changes: dropping
// the newest events, not the oldest, is what keeps that order.
func (pw *prefixWatch) push(ev Event) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.done {
		return
	}
	if pw.missed {
		select {
		case pw.ch <- Event{Key: pw.prefix, Type: EventMoved}:
			pw.missed = false
		default:
			return // still full: ev is covered by the EventMoved to come
		}
		if ev.Type == EventMoved {
			return // the one just queued says the same
		}
	}
	select {
	case pw.ch <- ev:
	default:
		pw.missed = true
	}
}

// end closes the channel.
func (pw *prefixWatch) end() {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if !pw.done {
		pw.done = true
		close(pw.ch)
	}
}
