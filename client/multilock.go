package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// multiRollbackTimeout bounds the release of what a failed MultiLock took
// when the caller's ctx has ended.
const multiRollbackTimeout = 10 * time.Second

// MultiLock is a handle on several exclusive locks taken together: Lock
// and TryLock take all of them or none.
//
// What is atomic and what is not. Keys are taken group by group, in one
// global order (lock group, then key) whatever order they were given in.
// The keys of one lock group are taken by one request that the group's
// master decides in one Paxos command: either every one of them is granted
// or none is, and no other client ever sees some of them held by this
// MultiLock and others not (State, watches, LOCK_OCCUPIED answers). That
// holds for TryLock, and for Lock when none of the group's keys is held or
// queued for. Across groups nothing is atomic: the groups are taken one
// after the other, so while Lock or TryLock runs the groups taken so far
// are held and visible to others, and when a later group cannot be taken
// they are released again (all or none by rollback, each key's token then
// never used). When Lock finds a key of a group taken, it waits for that
// group's keys one by one, in the same order, as single locks — those keys
// are not taken atomically either. Because every MultiLock takes keys in
// one order, two MultiLocks that share keys never wait for each other in a
// cycle: no deadlock.
//
// Once Lock returns nil, every key is held with its own fencing token
// (Token): keys granted by one command have the same token, which is
// still unique and increasing for each key. Each key is then an ordinary
// lock: renewed (AutoRenew), lost and released on its own. Unlock releases
// them one by one, in reverse order, so a release is not atomic.
type MultiLock struct {
	c      *Client
	keys   []string // in acquisition order
	locks  []*Mutex // locks[i] is keys[i]'s
	groups []int    // groups[i] is keys[i]'s lock group
	err    error
}

// MultiLock returns a handle on the exclusive locks of keys (at least one,
// no duplicates). The options apply to every key (TTL, AutoRenew, Weight,
// MaxWait — which bounds each key's wait, Value). It sends nothing.
func (c *Client) MultiLock(keys []string, opts ...Option) *MultiLock {
	ml := &MultiLock{c: c}
	switch {
	case c == nil:
		ml.err = invalid("nil *Client")
		return ml
	case len(keys) == 0:
		ml.err = invalid("multi-lock of no keys")
		return ml
	}
	o := buildOptions(opts)
	if o.processOwner {
		ml.err = invalid("multi-lock: ProcessOwner does not apply")
		return ml
	}
	groups := wire.DefaultGroups
	if v := c.View(); v != nil && len(v.Groups) > 0 {
		groups = len(v.Groups)
	}
	type entry struct {
		key   string
		group int
	}
	es := make([]entry, 0, len(keys))
	for _, k := range keys {
		es = append(es, entry{k, wire.GroupOf(wire.KeyHash(c.cfg.Namespace, k), groups)})
	}
	slices.SortFunc(es, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.key, b.key))
	})
	for i, e := range es {
		if i > 0 && es[i-1].key == e.key {
			ml.err = invalid("multi-lock: key %q given twice", e.key)
		}
		ml.keys = append(ml.keys, e.key)
		ml.groups = append(ml.groups, e.group)
		ml.locks = append(ml.locks, c.newMutex(e.key, wire.KindExclusive, c.newOwner(o), o))
	}
	return ml
}

// Keys returns the keys in the order they are acquired: by lock group,
// then key.
func (ml *MultiLock) Keys() []string { return slices.Clone(ml.keys) }

// Mutex returns the handle of key (nil if key is not one of the
// MultiLock's), for its Token, Lost or Value.
func (ml *MultiLock) Mutex(key string) *Mutex {
	if i := slices.Index(ml.keys, key); i >= 0 {
		return ml.locks[i]
	}
	return nil
}

// Token returns key's fencing token while held, 0 otherwise.
func (ml *MultiLock) Token(key string) uint64 { return ml.Mutex(key).Token() }

func (ml *MultiLock) check() error {
	if ml == nil {
		return invalid("nil *MultiLock")
	}
	if ml.err != nil {
		return ml.err
	}
	for _, m := range ml.locks {
		if err := m.check(); err != nil {
			return err
		}
	}
	return nil
}

// Lock takes every key: group by group, first with one atomic request
// for the group's keys; if one of them is held or queued for, it waits for
// that group's keys one by one in the server's queues (see Mutex.Lock).
// If a key cannot be taken (ctx ends, MaxWait passes — it bounds each
// key's wait —, an error), the keys already taken are released and the
// error names the key.
func (ml *MultiLock) Lock(ctx context.Context) error {
	return ml.take(ctx, true)
}

// TryLock takes every key if each is free (and not queued for): each
// group's keys with one atomic request, groups in order. At the first
// group with a key taken it releases the groups already taken and returns
// that key's *LockedError (wrapping ErrLocked).
func (ml *MultiLock) TryLock(ctx context.Context) error {
	return ml.take(ctx, false)
}

func (ml *MultiLock) take(ctx context.Context, block bool) error {
	if err := ml.check(); err != nil {
		return err
	}
	for i := 0; i < len(ml.locks); {
		j := i + 1
		for j < len(ml.locks) && ml.groups[j] == ml.groups[i] {
			j++
		}
		err := ml.tryGroup(ctx, i, j)
		if errors.Is(err, errMultiUnsupported) {
			err = ml.takeEach(ctx, i, j, (*Mutex).TryLock) // an older server
		}
		if block && errors.Is(err, ErrLocked) {
			err = ml.takeEach(ctx, i, j, (*Mutex).Lock)
		}
		if err != nil {
			return errors.Join(err, ml.rollback(ctx, i))
		}
		i = j
	}
	return nil
}

// takeEach takes locks[i:j] one by one with lock; on failure it releases
// those it took and returns the error naming the key.
func (ml *MultiLock) takeEach(ctx context.Context, i, j int, lock func(*Mutex, context.Context) error) error {
	for k := i; k < j; k++ {
		if err := lock(ml.locks[k], ctx); err != nil {
			rerr := ml.rollbackRange(ctx, i, k)
			return errors.Join(fmt.Errorf("client: multi-lock: key %q: %w", ml.keys[k], err), rerr)
		}
	}
	return nil
}

// errMultiUnsupported: the server does not know MultiAcquire.
var errMultiUnsupported = errors.New("client: multi-acquire not supported by the server")

// tryGroup takes locks[i:j], all of one lock group, with one MultiAcquire:
// all or none.
func (ml *MultiLock) tryGroup(ctx context.Context, i, j int) error {
	ms := ml.locks[i:j]
	if len(ms) > wire.MaxMultiKeys {
		return errMultiUnsupported // more than one request can carry
	}
	cores := make([]*ownerLock, 0, len(ms))
	handedOff := false
	defer func() {
		if !handedOff {
			for k, lc := range cores {
				ms[k].leave(lc)
			}
		}
	}()
	for _, m := range ms {
		lc, err := m.enter(ctx)
		if err != nil {
			return fmt.Errorf("client: multi-lock: key %q: %w", m.key, err)
		}
		cores = append(cores, lc)
		lc.mu.Lock()
		n := lc.count
		lc.mu.Unlock()
		if n > 0 {
			// Held already (the MultiLock is locked again): the
			// one-by-one path counts it like Mutex.Lock does.
			return errMultiUnsupported
		}
	}
	first := ms[0]
	msg := &wire.MultiAcquire{Client: first.owner.Client, TTLMs: ttlMs(first.opts.ttl), Value: first.Value()}
	for _, m := range ms {
		msg.Keys = append(msg.Keys, m.key)
		msg.IDs = append(msg.IDs, m.owner.ID)
	}
	from := time.Now()
	res, err := ml.c.do(ctx, "multilock", first.key, first.hash, wire.TypeMultiAcquire, msg)
	if err != nil {
		if res.unknown && !errors.Is(err, ErrClosed) {
			// The keys may have been granted after all: make sure they
			// are not left held, in the background, keeping the slots.
			handedOff = ml.c.goClean(func() {
				for k, lc := range cores {
					lc.cleanup(0)
					ms[k].leave(lc)
				}
			})
		}
		return fmt.Errorf("client: multi-lock: keys %q: %w", msg.Keys, err)
	}
	r := res.resp
	switch {
	case r.Status == wire.StatusSuccess && len(r.Tokens) == len(ms):
		for k, m := range ms {
			g := acquired{token: r.Tokens[k], ttl: effTTL(m.opts.ttl, r.TTLLeftMs, 0), from: from}
			h := ml.c.newHold(cores[k], g, m.opts)
			cores[k].mu.Lock()
			cores[k].h, cores[k].count = h, 1
			cores[k].mu.Unlock()
		}
		return nil
	case r.Status == wire.StatusLockOccupied:
		k := min(int(r.KeyIndex), len(ms)-1)
		return fmt.Errorf("client: multi-lock: key %q: %w", ms[k].key, ms[k].lockedErr(r))
	case r.Status == wire.StatusBadRequest && unknownRequest(r):
		return errMultiUnsupported
	}
	return statusErr("multilock", first.key, r)
}

// rollback releases the first n locks, in reverse order.
func (ml *MultiLock) rollback(ctx context.Context, n int) error {
	return ml.rollbackRange(ctx, 0, n)
}

// rollbackRange releases locks[from:to], in reverse order.
func (ml *MultiLock) rollbackRange(ctx context.Context, from, to int) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), multiRollbackTimeout)
	defer cancel()
	var errs []error
	for i := to - 1; i >= from; i-- {
		if err := ml.locks[i].Unlock(rctx); err != nil && !errors.Is(err, ErrLockLost) {
			errs = append(errs, fmt.Errorf("client: multi-lock: rollback of key %q: %w", ml.keys[i], err))
		}
	}
	return errors.Join(errs...)
}

// Unlock releases every key, in reverse order, and returns the errors of
// those that failed (see Mutex.Unlock: ErrNotHeld, ErrLockLost...).
func (ml *MultiLock) Unlock(ctx context.Context) error {
	if err := ml.check(); err != nil {
		return err
	}
	var errs []error
	for i := len(ml.locks) - 1; i >= 0; i-- {
		if err := ml.locks[i].Unlock(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unknownRequest reports whether r is an older server's answer to a
// request type it does not know.
func unknownRequest(r *wire.Response) bool {
	return strings.Contains(r.Msg, wire.ErrUnknownType.Error()) || strings.Contains(r.Msg, "unsupported request")
}
