package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// State is a key's lock state as the master of its group sees it.
type State struct {
	// Key is the lock's key.
	Key string
	// Held reports whether anyone holds the lock.
	Held bool
	// Holder is the holder (for a read lock, one of the readers).
	Holder wire.Owner
	// Token is the holder's fencing token.
	Token uint64
	// Kind is the held lock's kind.
	Kind wire.Kind
	// Readers is how many owners hold the key for reading.
	Readers int
	// TTLLeft is how long the holder's lock has left without a renewal.
	TTLLeft time.Duration
	// QueueLen is the number of waiters (it may be nonzero while the key is
	// free, while a grant to a waiter is in flight).
	QueueLen int
	// Value is the holder's value (see the Value option); for a read lock,
	// that of the reader named in Holder.
	Value string
	// Permits and InUse are, for a semaphore (Kind semaphore; Readers
	// counts its holders), its permit total and the permits held.
	Permits, InUse int
	// DelayLeft, when not 0, is what is left of the key's lock-delay (see
	// LockDelay): until then the key is granted to nobody new, even when
	// Held is false.
	DelayLeft time.Duration
}

// State asks the master of key's group for the key's state; no Paxos round
// is made. A free key is not an error: State.Held is false.
func (c *Client) State(ctx context.Context, key string) (State, error) {
	if c == nil {
		return State{}, invalid("nil *Client")
	}
	if err := validKey(key); err != nil {
		return State{}, err
	}
	res, err := c.do(ctx, "state", key, wire.KeyHash(c.cfg.Namespace, key), wire.TypeState, &wire.State{Key: key})
	if err != nil {
		return State{}, err
	}
	st, ok := stateOf(key, res.resp)
	if !ok {
		return State{}, statusErr("state", key, res.resp)
	}
	return st, nil
}

// stateOf reads a State answer (r: SUCCESS or LOCK_DELETED, ok false for
// any other status).
func stateOf(key string, r *wire.Response) (State, bool) {
	st := State{Key: key, QueueLen: int(r.QueueLen), DelayLeft: time.Duration(r.RetryAfterMs) * time.Millisecond}
	switch r.Status {
	case wire.StatusSuccess:
		st.Held = true
		st.Holder, st.Token, st.Kind = r.Holder, r.Token, r.Kind
		st.Readers, st.Value = int(r.Readers), r.Value
		st.TTLLeft = time.Duration(r.TTLLeftMs) * time.Millisecond
		st.Permits, st.InUse = int(r.Permits), int(r.InUse)
		return st, true
	case wire.StatusLockDeleted:
		return st, true
	}
	return State{}, false
}

// EventType says what happened to a watched key: EventAcquired,
// EventReleased, EventExpired, EventRevoked or EventTimeout.
type EventType = wire.Event

// Event types; see wire.Event.
const (
	// EventAcquired: the key was granted with a token above the last seen.
	EventAcquired = wire.EventAcquired
	// EventReleased: the lock was released by its holder.
	EventReleased = wire.EventReleased
	// EventExpired: the lock's TTL ran out without a renewal.
	EventExpired = wire.EventExpired
	// EventRevoked: the lock was taken from its holder by other means.
	// Today a holder is told so (in a Lost push, which closes the
	// handle's Lost channel) when its namespace is removed or its secret
	// changed; the hold stays in the lock table until its TTL runs out,
	// which watchers see as EventExpired.
	EventRevoked = wire.EventRevoked
	// EventHoldLimit: the lock reached its maximum hold time (the
	// holder's MaxHold option) and the server ended it, renewed or not:
	// a revocation of this cause.
	EventHoldLimit = wire.EventHoldLimit
	// EventTimeout: the watch's MaxWait passed; it is the watch's last event.
	EventTimeout = wire.EventTimeout
	// EventMoved (WatchPrefix only; Key is the prefix): changes under the
	// prefix were not reported: the prefix watch was registered again
	// with the next master of one lock group (after a master change, a
	// reconnect or a namespace move), and changes of that group's keys
	// made while it was away were missed; or the reader let the watch's
	// channel fill, and the changes that came meanwhile were dropped.
	// Every later change is reported: a List of the prefix after this
	// event gives the present state to resume from.
	EventMoved = wire.EventMoved
)

// Event is a change of a watched key.
type Event struct {
	// Key is the watched key.
	Key string
	// Type says what happened.
	Type EventType
	// Token is the key's token after the event (EventAcquired) or the token
	// of the lock that ended.
	Token uint64
	// Holder is the new holder (EventAcquired), else zero.
	Holder wire.Owner
	// Value is the new holder's value (EventAcquired). A holder that
	// changes its value (Mutex.SetValue) causes another EventAcquired with
	// the same Token and the new value; one that gives back some of its
	// semaphore permits (Semaphore.ReleasePermits), another EventAcquired
	// with the same Token and Value (State gives the permits).
	Value string
}

// Watcher reports a key's changes on a channel. The watch lives in the
// master's memory; the client registers it again, with the last token it
// reported, after a reconnect or a master change, so the watcher sees the
// latest state, though not every step in between.
type Watcher struct {
	c          *Client
	id         uint64
	key        string
	hash       uint64
	continuous bool
	deadline   time.Time
	ch         chan Event

	mu      sync.Mutex
	token   uint64 // the highest token reported
	value   string // the value last reported with token (EventAcquired)
	rewound bool   // registered with token-1 to hear the current value again
	last    Event
	hasLast bool
	done    bool
	err     error
	rereg   bool // a re-registration goroutine runs
	again   bool // re-register once more when it is done

	conn   *conn  // guarded by Client.mu: where the watch is registered
	master string // guarded by Client.mu: the master it is registered with (conn's address unless relayed)

	// pfx, for one group's part of a prefix watch (WatchPrefix), is the
	// watch it is part of; key is then the prefix and hash the group.
	pfx *prefixWatch
}

// watchBuffer is the capacity of a Watcher's channel. When it is full the
// oldest event is dropped: a watch reports the latest state.
const watchBuffer = 16

// Watch reports changes of key relative to afterToken (the last token the
// caller knows of, 0 for none): the server pushes an event when the key is
// granted with a higher token, or the lock holding afterToken ends; if the
// key already moved past afterToken the first event comes at once. Without
// the Continuous option the watch ends after one event; MaxWait bounds its
// life (an EventTimeout is then the last event). ctx bounds only the
// registration. The events channel is closed when the watch ends; Close
// ends it early.
func (c *Client) Watch(ctx context.Context, key string, afterToken uint64, opts ...Option) (*Watcher, error) {
	if c == nil {
		return nil, invalid("nil *Client")
	}
	if err := validKey(key); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	w := &Watcher{
		c:          c,
		id:         c.nextWatch.Add(1),
		key:        key,
		hash:       wire.KeyHash(c.cfg.Namespace, key),
		continuous: o.continuous,
		ch:         make(chan Event, watchBuffer),
		token:      afterToken,
	}
	if o.maxWait > 0 {
		w.deadline = time.Now().Add(o.maxWait)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.watches[w.id] = w
	c.mu.Unlock()
	switch err := w.register(ctx); {
	case err == nil:
	case errors.Is(err, errRetry):
		w.reregister()
	default:
		w.finish(nil)
		return nil, err
	}
	return w, nil
}

// errRetry: the registration landed on a connection or master that is
// already gone; register again.
var errRetry = errors.New("re-register")

func (w *Watcher) register(ctx context.Context) error {
	c := w.c
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return nil
	}
	tok := w.token
	// Re-registering after an acquire was reported: ask from the token
	// below it, so the server reports the holder again with its current
	// value (a SetValue made while the watch was away is not missed);
	// deliver drops it if nothing changed.
	w.rewound = tok > 0 && w.hasLast && w.last.Type == EventAcquired && w.last.Token == tok
	if w.rewound {
		tok--
	}
	w.mu.Unlock()
	var wait uint32
	if !w.deadline.IsZero() {
		left := time.Until(w.deadline)
		if left <= 0 {
			w.deliver(Event{Key: w.key, Type: EventTimeout})
			return nil
		}
		wait = waitMs(left)
	}
	var flags wire.Flags
	if w.continuous {
		flags |= wire.FlagContinuous
	}
	msg := &wire.Watch{Key: w.key, WatchID: w.id, Token: tok, Flags: flags, MaxWaitMs: wait}
	if w.pfx != nil {
		msg.Flags |= wire.FlagPrefix
		msg.Group = uint32(w.hash)
	}
	before := c.view.Load()
	res, err := c.do(ctx, "watch", w.key, w.hash, wire.TypeWatch, msg)
	if err != nil {
		return err
	}
	if res.resp.Status != wire.StatusSuccess {
		return statusErr("watch", w.key, res.resp)
	}
	c.mu.Lock()
	live := c.watches[w.id] == w
	if live {
		w.conn, w.master = res.cn, res.master
	}
	c.mu.Unlock()
	if !live {
		// Closed while registering: Close could not know where to send
		// the Unwatch, so send it here.
		res.cn.post(wire.TypeUnwatch, w.unwatch())
		return nil
	}
	if res.cn.dead() || c.movedSince(before, w.hash, res.master) {
		return errRetry
	}
	if w.pfx != nil {
		w.pfx.registered(w)
	}
	return nil
}

// unwatch is the Unwatch that drops the watch.
func (w *Watcher) unwatch() *wire.Unwatch {
	if w.pfx != nil {
		return &wire.Unwatch{Key: w.key, WatchID: w.id, Flags: wire.FlagPrefix, Group: uint32(w.hash)}
	}
	return &wire.Unwatch{Key: w.key, WatchID: w.id}
}

// reregister registers the watch again in the background, with backoff,
// until it succeeds or the watch or client ends.
func (w *Watcher) reregister() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	if w.rereg {
		w.again = true
		w.mu.Unlock()
		return
	}
	w.rereg = true
	w.mu.Unlock()
	go func() {
		c := w.c
		for n := 1; ; n++ {
			w.mu.Lock()
			w.again = false
			done := w.done
			w.mu.Unlock()
			if done || c.sleep(c.ctx, c.backoff(min(n, 8))) != nil {
				break
			}
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout*time.Duration(c.cfg.MaxRetries+1))
			err := w.register(ctx)
			cancel()
			switch {
			case err == nil:
				w.mu.Lock()
				if !w.again {
					w.rereg = false
					w.mu.Unlock()
					return
				}
				w.mu.Unlock()
				continue
			case errors.Is(err, ErrClosed):
			case errors.Is(err, ErrBadRequest), errors.Is(err, ErrAuth):
				w.finish(err)
			default:
				c.log.Debug("paxlock: watch re-registration failed; retrying", "key", w.key, "err", err)
				continue
			}
			break
		}
		w.mu.Lock()
		w.rereg = false
		w.mu.Unlock()
	}()
}

func (c *Client) onWatchEvent(cn *conn, p *wire.WatchEvent) {
	c.mu.Lock()
	w := c.watches[p.WatchID]
	if p.Event == wire.EventMoved {
		// The master the watch was registered with over cn dropped it
		// (it stepped down, or the namespace left it): register it again
		// where the key is served now, from the last token reported;
		// the event is not the user's. A watch now registered over
		// another connection is not the one dropped; one with no
		// connection is being registered, and may have landed there.
		moved := w != nil && (w.conn == cn || w.conn == nil)
		if moved {
			w.conn = nil
		}
		c.mu.Unlock()
		if moved {
			w.reregister()
		}
		return
	}
	c.mu.Unlock()
	switch {
	case w == nil:
	case w.pfx != nil:
		w.pfx.push(Event{Key: p.Key, Type: p.Event, Token: p.Token, Holder: p.Holder, Value: p.Value})
	default:
		w.deliver(Event{Key: w.key, Type: p.Event, Token: p.Token, Holder: p.Holder, Value: p.Value})
	}
}

// deliver queues an event without blocking, dropping duplicates (a watch
// registered twice across a reconnect) and, when the channel is full, the
// oldest event.
func (w *Watcher) deliver(ev Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if w.rewound && ev.Type != EventAcquired && ev.Type != EventTimeout && ev.Token+1 == w.token {
		// The lock we had reported ended while the watch was away; the
		// server names it by the token we registered with.
		ev.Token = w.token
	}
	if w.hasLast && ev == w.last {
		return
	}
	if ev.Type == EventAcquired && (ev.Token < w.token || ev.Token == w.token && ev.Value == w.value) {
		return
	}
	w.last, w.hasLast = ev, true
	if ev.Token > w.token {
		w.token = ev.Token
	}
	if ev.Type == EventAcquired {
		w.value = ev.Value
	}
	for sent := false; !sent; {
		select {
		case w.ch <- ev:
			sent = true
		default:
			select {
			case <-w.ch:
			default:
			}
		}
	}
	if !w.continuous || ev.Type == EventTimeout {
		w.finishLocked(nil)
	}
}

// Events returns the channel of events. It is closed when the watch ends:
// after its one event (without Continuous), after EventTimeout, on Close,
// or when the Client closes (Err is then ErrClosed).
func (w *Watcher) Events() <-chan Event {
	if w == nil {
		return nil
	}
	return w.ch
}

// Err returns why the watch ended abnormally (ErrClosed when the Client
// closed, or a refusal from the server while re-registering), or nil.
func (w *Watcher) Err() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the watch: it closes the events channel and tells the server
// to drop the watch, without waiting for the answer.
func (w *Watcher) Close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return nil
	}
	cn := w.finishLocked(nil)
	w.mu.Unlock()
	if cn != nil && !cn.dead() {
		cn.post(wire.TypeUnwatch, w.unwatch())
	}
	return nil
}

func (w *Watcher) finish(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.finishLocked(err)
	}
}

// finishLocked ends the watch (w.mu held) and returns the connection it
// was registered on.
func (w *Watcher) finishLocked(err error) *conn {
	w.done, w.err = true, err
	close(w.ch)
	if w.pfx != nil && err != nil {
		w.pfx.cancel() // a part that ends on its own ends the prefix watch
	}
	c := w.c
	c.mu.Lock()
	cn := w.conn
	if c.watches[w.id] == w {
		delete(c.watches, w.id)
	}
	c.mu.Unlock()
	return cn
}
