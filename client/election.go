package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/paxlock/paxlock/client/wire"
)

// Election is leader election on one key, in the shape of etcd's
// concurrency.Election: Campaign blocks until this handle leads, the
// leader publishes a value (Proclaim changes it without a new election),
// Resign steps down, and anyone reads or follows the leader with Leader
// and Observe.
//
// It is built from the pieces the lock service has: the leader holds the
// key's exclusive lock with AutoRenew, the leader's value is the lock's
// holder value, and Observe is a continuous watch. Candidates queue on the
// server (woken by push, by weight and arrival), so a resignation or an
// expiry hands leadership to the next candidate in one Paxos command; the
// new leader's fencing token, higher than every earlier one, serves as its
// term. Leadership ends when Resign returns, or when Lost is closed (the
// lock expired or the server said it is gone): a leader must stop acting
// as one then.
//
// An Election is one candidate: its methods are safe for concurrent use,
// and a process that wants several candidates makes several Elections.
type Election struct {
	onMutex // Key, Token, ValidUntil, Lost, Context: the leadership's
	c       *Client
	key     string
	opts    []Option

	cmu sync.Mutex // one Campaign at a time

	mu sync.Mutex
	m  *Mutex // the leadership lock once Campaign won
}

// Leader is an election's leader as the master of the key's group sees
// it.
type Leader struct {
	// Key is the election's key.
	Key string
	// Value is the value the leader campaigned with or last proclaimed.
	Value string
	// Token is the leader's fencing token: it rises with every new leader
	// (a Proclaim keeps it), so it serves as the leader's term.
	Token uint64
	// Holder is the leader's lock owner.
	Holder wire.Owner
}

// Election returns a candidate handle for the election named name (a lock
// key). It sends nothing. opts apply to the leadership lock: TTL (how long
// a leader that vanished keeps leadership, default DefaultTTL), Weight,
// MaxWait; AutoRenew is always on.
func (c *Client) Election(name string, opts ...Option) *Election {
	e := &Election{c: c, key: name, opts: slices.Clone(opts)}
	e.onMutex = onMutex{key: name, cur: e.leader}
	return e
}

// leader returns the leadership lock once Campaign won, else nil.
func (e *Election) leader() *Mutex {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m
}

// Campaign waits until this candidate is the leader, then returns with
// value published as the leader's value (at most wire.MaxValueLen bytes:
// longer is an error wrapping ErrInvalid and wire.ErrValueTooLarge,
// nothing sent). It returns early with ctx's error, or ErrTimeout after
// MaxWait; the candidate then leaves the queue. While the key's group has
// no master or the cluster cannot be reached (ErrNoMaster,
// ErrUnavailable, ErrOverloaded) it keeps trying, with backoff, until ctx
// ends. Campaign by a candidate
// that leads already only proclaims value. Campaigns of one Election run
// one at a time; the other methods do not wait for one in progress
// (cancel its ctx to stop campaigning).
func (e *Election) Campaign(ctx context.Context, value string) error {
	if err := wire.ValidateValue(value); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	e.cmu.Lock()
	defer e.cmu.Unlock()
	e.mu.Lock()
	old := e.m
	if old != nil && !old.Held() {
		e.m = nil // leadership was lost: campaign afresh
	}
	e.mu.Unlock()
	if old != nil {
		if old.Held() {
			return old.SetValue(ctx, value)
		}
		_ = old.Unlock(ctx) // end the lost hold's count
	}
	m := e.c.Mutex(e.key, append(slices.Clone(e.opts), AutoRenew(), Value(value))...)
	// The group of the key may have no master for a while (a master
	// change): a campaign outlasts that, as it outlasts a long queue.
	for n := 1; ; n++ {
		err := m.Lock(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || !campaignRetryable(err) {
			return err
		}
		e.c.log.Debug("paxlock: campaign interrupted; trying again", "key", e.key, "err", err)
		if serr := e.c.sleep(ctx, e.c.backoff(min(n, 8))); serr != nil {
			return err
		}
	}
	e.mu.Lock()
	e.m = m
	e.mu.Unlock()
	return nil
}

// campaignRetryable reports whether a failed campaign should simply go
// on: the cluster was unreachable, had no master or shed load on every
// attempt of one Lock call.
func campaignRetryable(err error) bool {
	return errors.Is(err, ErrNoMaster) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOverloaded)
}

// Proclaim changes the leader's value without a new election (the token
// stays). It returns an error wrapping ErrNotLeader if this candidate does
// not lead (and ErrLockLost if it found out now that it lost leadership).
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := wire.ValidateValue(value); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	e.mu.Lock()
	m := e.m
	e.mu.Unlock()
	if m == nil || !m.Held() {
		return fmt.Errorf("client: proclaim %q: %w", e.key, ErrNotLeader)
	}
	return m.SetValue(ctx, value)
}

// Resign gives up leadership (the next candidate in the queue becomes
// leader at once). Resign by a candidate that does not lead does nothing
// and returns nil (it does not stop a Campaign in progress: cancel that
// Campaign's ctx); one whose leadership was lost returns an error
// wrapping ErrLockLost.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	m := e.m
	e.m = nil
	e.mu.Unlock()
	if m == nil {
		return nil
	}
	if err := m.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		return err
	}
	return nil
}

// IsLeader reports whether this candidate leads and has not seen its
// leadership lost.
func (e *Election) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m != nil && e.m.Held()
}

// Leader returns the current leader, or an error wrapping ErrNoLeader if
// there is none. It reads the master's state (no Paxos round).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	st, err := e.c.State(ctx, e.key)
	if err != nil {
		return Leader{}, err
	}
	if !st.Held {
		return Leader{}, fmt.Errorf("client: election %q: %w", e.key, ErrNoLeader)
	}
	return Leader{Key: e.key, Value: st.Value, Token: st.Token, Holder: st.Holder}, nil
}

// Observe reports the election's leaders on the returned channel until
// ctx ends (the channel is then closed): the current one first, if any,
// then each new leader and each Proclaim. The latest leader is always
// delivered; leaders that came and went while the receiver was slow, or
// while the watch was being registered again after a reconnect or a
// master change, may be skipped (coalesced), never reordered: tokens
// delivered do not decrease. A leader resigning is not reported by
// itself; the next leader is.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go e.observe(ctx, out)
	return out
}

func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	var (
		last    Leader // the last leader delivered
		pending *Leader
		after   uint64 // the watch's token: the last leader seen
	)
	for ctx.Err() == nil {
		// Watch from just below the last leader seen, so that its
		// current value is reported again (a Proclaim made while no
		// watch was registered is not missed); an unchanged leader is
		// not delivered twice.
		from := after
		if from > 0 {
			from--
		}
		w, err := e.c.Watch(ctx, e.key, from, Continuous())
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) || ctx.Err() != nil {
				return
			}
			if e.c.sleep(ctx, e.c.backoff(1)) != nil {
				return
			}
			continue
		}
		ended := false
		for !ended {
			var send chan<- Leader
			var next Leader
			if pending != nil {
				send, next = out, *pending
			}
			select {
			case <-ctx.Done():
				_ = w.Close()
				return
			case ev, ok := <-w.Events():
				if !ok {
					ended = true
					break
				}
				if ev.Type != EventAcquired || ev.Token < after {
					continue
				}
				after = ev.Token
				l := Leader{Key: e.key, Value: ev.Value, Token: ev.Token, Holder: ev.Holder}
				if l != last {
					pending = &l
				} else {
					pending = nil
				}
			case send <- next:
				last, pending = next, nil
			}
		}
		// The watch ended (the client closing, or a refusal while
		// re-registering): start again after the last leader seen.
		if errors.Is(w.Err(), ErrClosed) {
			return
		}
		if e.c.sleep(ctx, e.c.backoff(1)) != nil {
			return
		}
	}
}
