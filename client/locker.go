package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Locker returns the handle as a sync.Locker, for code written against
// that interface (etcd's concurrency.NewLocker is the same idea).
//
// sync.Locker has no context and no error, so:
//
//   - Lock blocks until the lock is held. Errors that a later attempt can
//     cure (ErrTimeout, ErrNoMaster, ErrOverloaded, ErrUnavailable, a lost
//     connection, a lock lost before Lock returned) are retried with a
//     backoff of 50 ms doubling to 2 s. Errors that no retry can cure —
//     ErrClosed, ErrAuth, ErrInvalid, ErrBadRequest, and ErrLockLost for a
//     reentrant Lock whose handle's lock was lost while held (the handle
//     answers it to every Lock until the matching Unlocks) — panic with the
//     error, because returning would let the caller run its critical
//     section without the lock.
//   - Unlock releases the lock. Unlock of a Locker that is not locked
//     panics, as sync.Mutex's does. A release that fails is not reported
//     (the lock then expires after its TTL); a lock lost while held is not
//     reported either.
//
// Locks through one handle are reentrant, as the Mutex's are (a second
// Lock does not deadlock; it needs a second Unlock): hand each goroutine
// its own Mutex handle, as with the Mutex API.
//
// A Locker cannot tell its user that the lock was lost while held and has
// no fencing token: code that must stop when it loses the lock, or that
// fences its writes, uses the Mutex itself (Lost, Token).
func (m *Mutex) Locker() sync.Locker { return &locker{m: m} }

type locker struct{ m *Mutex }

// fatalLockErr reports whether err from Lock can never be cured by trying
// again through the same handle.
func fatalLockErr(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrAuth) ||
		errors.Is(err, ErrInvalid) || errors.Is(err, ErrBadRequest)
}

func (l *locker) Lock() {
	const first, most = 50 * time.Millisecond, 2 * time.Second
	backoff := first
	for {
		err := l.m.Lock(context.Background())
		if err == nil {
			return
		}
		if fatalLockErr(err) || l.lostWhileHeld(err) {
			panic(err)
		}
		l.m.c.log.Debug("paxlock: Locker retries", "key", l.m.Key(), "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.m.c.done:
			t.Stop()
		}
		backoff = min(2*backoff, most)
	}
}

// lostWhileHeld reports whether err is the loss of a lock the handle
// still counts as held (a reentrant Lock after the loss): the handle
// refuses every Lock until the matching Unlocks, so no retry cures it.
func (l *locker) lostWhileHeld(err error) bool {
	return errors.Is(err, ErrLockLost) && l.m.Token() != 0
}

func (l *locker) Unlock() {
	err := l.m.Unlock(context.Background())
	if errors.Is(err, ErrNotHeld) {
		panic(err)
	}
	if err != nil {
		l.m.c.log.Debug("paxlock: Locker unlock", "key", l.m.Key(), "err", err)
	}
}
