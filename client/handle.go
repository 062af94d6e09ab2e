// This file is the contract every lock handle shares (Handle) and its one
// implementation for the handles built on a Mutex.

package client

import (
	"context"
	"time"
)

// Handle is what every handle on a leased hold answers, whatever the
// primitive: a Mutex (so either side of an RWMutex), a Semaphore's
// permits, an Election's leadership. The accessors read the hold current
// at the call and the client's monotonic clock, so that the holder's
// contract in the package documentation holds for all of them alike.
type Handle interface {
	// Key is the lock's key (a semaphore's or an election's name).
	Key() string
	// Token is the fencing token of the current hold (kept after a loss
	// until the matching release), 0 when there is none.
	Token() uint64
	// ValidUntil is the instant, on the client's monotonic clock, until
	// which the client guarantees the hold; the zero time when nothing
	// valid is held.
	ValidUntil() time.Time
	// Lost is closed when the current hold is lost; already closed when
	// nothing is held.
	Lost() <-chan struct{}
	// Context is cancelled the moment the current hold ends; already
	// cancelled when nothing is held.
	Context() context.Context
}

var (
	_ Handle = (*Mutex)(nil)
	_ Handle = (*Semaphore)(nil)
	_ Handle = (*Election)(nil)
)

// onMutex implements Handle once for a handle built on a Mutex (a
// Semaphore, an Election): every accessor asks the Mutex current at the
// call, and a nil one answers as a Mutex that holds nothing (Token 0,
// Lost closed, ValidUntil zero, Context cancelled with ErrNotHeld).
type onMutex struct {
	key string
	cur func() *Mutex
}

// Key returns the key (the semaphore's or the election's name).
func (o *onMutex) Key() string { return o.key }

// Token returns the fencing token of the current hold, 0 if none (see
// Mutex.Token). An election's token rises with every new leader: it
// serves as the leader's term.
func (o *onMutex) Token() uint64 { return o.cur().Token() }

// ValidUntil returns until when the client guarantees the current hold
// (see Mutex.ValidUntil); the zero time if there is none.
func (o *onMutex) ValidUntil() time.Time { return o.cur().ValidUntil() }

// Lost returns a channel closed when the current hold ends without its
// release or Resign (see Mutex.Lost); closed if there is none.
func (o *onMutex) Lost() <-chan struct{} { return o.cur().Lost() }

// Context returns a context cancelled the moment the current hold ends, by
// a loss or by its release (see Mutex.Context); already cancelled if
// there is none.
func (o *onMutex) Context() context.Context { return o.cur().Context() }
