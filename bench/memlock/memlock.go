// Package memlock is an in-memory lock service implementing load.Locker. It
// lets the harness be tested (and tried with -systems mem) without any
// server, and, with Broken, plays a lock service that breaks mutual
// exclusion so the overlap guard can be seen to work.
package memlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/bench/load"
)

// Options shape the fake.
type Options struct {
	// Name replaces "mem" as the system's name (to run several fakes).
	Name string
	// Latency is added to every call, like a network round trip.
	Latency time.Duration
	// Broken grants every acquire at once, whoever holds the key.
	Broken bool
	// NoRenew and NoReadWrite turn those capabilities off.
	NoRenew, NoReadWrite bool
}

// Locker is the in-memory lock service.
type Locker struct {
	opts   Options
	mu     sync.Mutex
	keys   map[string]*entry
	nextID atomic.Uint64
	closed atomic.Bool
}

type entry struct {
	holders map[uint64]holder
	changed chan struct{} // closed (and replaced) whenever a holder leaves
	waiters int
}

type holder struct {
	mode     load.Mode
	deadline time.Time
}

// New returns an empty in-memory lock service.
func New(opts Options) *Locker {
	return &Locker{opts: opts, keys: map[string]*entry{}}
}

// Name implements load.Locker.
func (l *Locker) Name() string {
	if l.opts.Name != "" {
		return l.opts.Name
	}
	return "mem"
}

// Display implements load.Locker.
func (l *Locker) Display() string {
	if l.opts.Name != "" {
		return "fake " + l.opts.Name
	}
	return "in-memory fake"
}

// Caps implements load.Locker.
func (l *Locker) Caps() load.Caps {
	return load.Caps{Renew: !l.opts.NoRenew, ReadWrite: !l.opts.NoReadWrite, Fencing: true,
		Wait: "in-process notification", Notes: []string{"a fake for testing the harness, not a lock service"}}
}

// Version implements load.Locker.
func (l *Locker) Version(context.Context) (string, error) { return "memlock", nil }

// NewSession implements load.Locker.
func (l *Locker) NewSession(context.Context, int) (load.Session, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("memlock: closed: %w", load.ErrUnavailable)
	}
	return &session{l: l}, nil
}

// Close implements load.Locker.
func (l *Locker) Close() error {
	l.closed.Store(true)
	return nil
}

// Held returns the number of keys that have holders or waiters (for tests:
// it must drop to zero once everything is released).
func (l *Locker) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

type session struct{ l *Locker }

func (s *session) delay(ctx context.Context) error {
	if d := s.l.opts.Latency; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// grantable drops expired holders and tells whether mode can be granted now,
// and if not, when the earliest holder expires.
func grantable(e *entry, mode load.Mode, now time.Time, broken bool) (bool, time.Time) {
	var earliest time.Time
	ok := true
	for id, h := range e.holders {
		if !now.Before(h.deadline) {
			delete(e.holders, id)
			continue
		}
		if mode != load.Read || h.mode != load.Read {
			ok = false
			if earliest.IsZero() || h.deadline.Before(earliest) {
				earliest = h.deadline
			}
		}
	}
	return ok || broken, earliest
}

func (s *session) Acquire(ctx context.Context, req load.Request) (load.Lease, error) {
	l := s.l
	if req.Mode != load.Exclusive && l.opts.NoReadWrite {
		return load.Lease{}, load.ErrUnsupported
	}
	if err := s.delay(ctx); err != nil {
		return load.Lease{}, err
	}
	l.mu.Lock()
	e := l.keys[req.Key]
	if e == nil {
		e = &entry{holders: map[uint64]holder{}, changed: make(chan struct{})}
		l.keys[req.Key] = e
	}
	e.waiters++
	for {
		now := time.Now()
		ok, earliest := grantable(e, req.Mode, now, l.opts.Broken)
		if ok {
			break
		}
		ch := e.changed
		l.mu.Unlock()
		t := time.NewTimer(earliest.Sub(now))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		l.mu.Lock()
		if err := ctx.Err(); err != nil {
			e.waiters--
			l.forget(req.Key, e)
			l.mu.Unlock()
			return load.Lease{}, err
		}
	}
	e.waiters--
	// One counter for all keys: strictly increasing per key too, and it
	// survives an entry being forgotten.
	id := l.nextID.Add(1)
	e.holders[id] = holder{mode: req.Mode, deadline: time.Now().Add(req.TTL)}
	lease := load.Lease{Key: req.Key, Mode: req.Mode, Token: id, Fresh: req.Fresh, Handle: id}
	l.mu.Unlock()
	return lease, nil
}

// forget drops an entry nobody holds or waits for; l.mu is held.
func (l *Locker) forget(key string, e *entry) {
	if len(e.holders) == 0 && e.waiters == 0 {
		delete(l.keys, key)
	}
}

func (s *session) Renew(ctx context.Context, le load.Lease, ttl time.Duration) error {
	l := s.l
	if l.opts.NoRenew {
		return load.ErrUnsupported
	}
	if err := s.delay(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[le.Key]
	id, _ := le.Handle.(uint64)
	if e == nil {
		return load.ErrNotHeld
	}
	h, ok := e.holders[id]
	if !ok || !time.Now().Before(h.deadline) {
		return load.ErrNotHeld
	}
	h.deadline = time.Now().Add(ttl)
	e.holders[id] = h
	return nil
}

func (s *session) Release(ctx context.Context, le load.Lease) error {
	l := s.l
	if err := s.delay(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[le.Key]
	id, _ := le.Handle.(uint64)
	if e == nil {
		return load.ErrNotHeld
	}
	h, ok := e.holders[id]
	delete(e.holders, id)
	close(e.changed)
	e.changed = make(chan struct{})
	l.forget(le.Key, e)
	if !ok || !time.Now().Before(h.deadline) {
		return load.ErrNotHeld
	}
	return nil
}

func (s *session) Close(context.Context) error { return nil }
