// This file is the non-reentrant mutex: Mutex.

package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/paxlock/paxlock/client"
)

// ErrReentrant is wrapped by the error of a Lock on a Mutex that holds
// its lock already, or is taking it.
var ErrReentrant = errors.New("recipe: lock already held by this holder")

// ReentrantError is the error of a reentrant Lock: it wraps ErrReentrant
// and names the key.
type ReentrantError struct {
	// Key is the lock's key.
	Key string
}

func (e *ReentrantError) Error() string {
	return fmt.Sprintf("recipe: lock %q: already held or being taken by this holder (the mutex is not reentrant)", e.Key)
}

// Unwrap returns ErrReentrant.
func (e *ReentrantError) Unwrap() error { return ErrReentrant }

// Mutex is a non-reentrant distributed lock. A client.Mutex handle is
// reentrant (Lock on a handle that holds counts, and Unlock releases at
// zero), which hides the bug of a goroutine that locks twice; this one
// refuses the second Lock at once, without sending anything, with a
// *ReentrantError, until Unlock. The holder is the handle, or with
// NewProcessMutex the whole client, as with client.ProcessOwner: there
// the second Lock through any ProcessMutex handle of the same client and
// key fails. Everything else (fencing token, Lost, renewal, waiting in the
// server's queue) is the client.Mutex's, reached through Client.Mutex.
//
// Failure semantics are client.Mutex's: a master change is transparent
// to a holder (the hold is replicated) and to a waiting Lock (re-queued
// by the client). A Lock that fails releases the handle's claim, so
// Lock may be called again; a lost lock stays claimed until Unlock
// (which returns an error wrapping client.ErrLockLost), so that the code
// that held it learns of the loss.
type Mutex struct {
	m     *client.Mutex
	claim *claim
}

// claim says whether a holder holds its lock or is taking it.
type claim struct {
	mu   sync.Mutex
	busy bool
}

func (c *claim) take(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy {
		return &ReentrantError{Key: key}
	}
	c.busy = true
	return nil
}

func (c *claim) give() {
	c.mu.Lock()
	c.busy = false
	c.mu.Unlock()
}

// processClaims are the ProcessMutex claims, by client and key: a
// ProcessOwner's hold is shared by every handle of the client.
var processClaims sync.Map // claimKey → *claim

type claimKey struct {
	c   *client.Client
	key string
}

// NewMutex returns a non-reentrant handle on the exclusive lock key; it is
// its own holder. It sends nothing; opts are client.Mutex's.
func NewMutex(c *client.Client, key string, opts ...client.Option) *Mutex {
	return &Mutex{m: c.Mutex(key, opts...), claim: &claim{}}
}

// NewProcessMutex returns a non-reentrant handle whose holder is the
// whole client (client.ProcessOwner): while one such handle of c holds
// key or is taking it, Lock through any of them fails with a
// *ReentrantError.
func NewProcessMutex(c *client.Client, key string, opts ...client.Option) *Mutex {
	cl, _ := processClaims.LoadOrStore(claimKey{c: c, key: key}, &claim{})
	return &Mutex{m: c.Mutex(key, append(opts, client.ProcessOwner())...), claim: cl.(*claim)}
}

// Lock takes the lock like client.Mutex.Lock, or fails at once with a
// *ReentrantError (wrapping ErrReentrant) if the holder holds it or a
// Lock of the holder is waiting for it.
func (m *Mutex) Lock(ctx context.Context) error { return m.lock(ctx, m.m.Lock) }

// TryLock is Lock that does not wait: like client.Mutex.TryLock.
func (m *Mutex) TryLock(ctx context.Context) error { return m.lock(ctx, m.m.TryLock) }

func (m *Mutex) lock(ctx context.Context, take func(context.Context) error) error {
	if err := m.claim.take(m.m.Key()); err != nil {
		return err
	}
	if err := take(ctx); err != nil {
		m.claim.give()
		return err
	}
	return nil
}

// Unlock releases the lock like client.Mutex.Unlock; afterwards Lock may
// take it again. It returns an error wrapping client.ErrNotHeld if the
// holder does not hold it.
func (m *Mutex) Unlock(ctx context.Context) error {
	err := m.m.Unlock(ctx)
	if !errors.Is(err, client.ErrNotHeld) {
		m.claim.give()
	}
	return err
}

// Client returns the underlying client.Mutex, for Token, Lost, Context,
// ValidUntil and SetValue. Lock and Unlock through it are reentrant:
// use the Mutex's.
func (m *Mutex) Client() *client.Mutex { return m.m }
