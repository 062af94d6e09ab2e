// This file is what the run forms hold (lock, rlock, wlock, sem acquire,
// multi): how each takes and releases its hold, how it learns of a loss,
// and what the command finds about it in its environment.

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// The environment variables through which a run form's command learns
// about the hold it runs under.
const (
	envKey       = "PAXLOCK_KEY"       // the key (sem: the semaphore's name)
	envToken     = "PAXLOCK_TOKEN"     // its fencing token, in decimal
	envKeys      = "PAXLOCK_KEYS"      // multi: the keys as given, separated by spaces
	envTokens    = "PAXLOCK_TOKENS"    // multi: their tokens, in the same order
	envPermits   = "PAXLOCK_PERMITS"   // sem: the permits held
	envSem       = "PAXLOCK_SEM"       // sem: the socket of sem release (semrelease.go)
	envNamespace = "PAXLOCK_NAMESPACE" // the namespace
)

// holder is what a run form holds while its command runs: a lock, one
// side of a read-write lock, a semaphore's permits or a multi-lock's keys.
type holder interface {
	// take acquires the hold: with block, waiting in the server's queue
	// until ctx ends; without, trying once (an error wrapping
	// client.ErrLocked when it is taken).
	take(ctx context.Context, block bool) error
	// held reports whether every part of the hold is still held; it
	// reads the validity clock, so a loss shows at once.
	held() bool
	// lost is closed when a part of the hold is lost. Call it after take.
	lost() <-chan struct{}
	// release gives the hold back.
	release(ctx context.Context) error
	// describe fills e's key, keys, token(s) and permits.
	describe(e *holdEvent)
	// env is what the command finds in its environment about the hold.
	env() []string
}

// holdOptions are the client options of a run form's hold: its TTL
// (-ttl, the client's default when 0), renewed in the background, its
// lock-delay (-lock-delay; none when 0), its maximum hold time
// (-max-hold; none when 0), its wait's weight (-weight; the default when
// 0) and its holder value (-value).
func holdOptions(o *options) []client.Option {
	ttl := o.ttl
	if ttl <= 0 {
		ttl = client.DefaultTTL
	}
	opts := []client.Option{client.TTL(ttl), client.AutoRenew()}
	if o.lockDelay > 0 {
		opts = append(opts, client.LockDelay(o.lockDelay))
	}
	if o.maxHold > 0 {
		opts = append(opts, client.MaxHold(o.maxHold))
	}
	if o.weight != 0 {
		opts = append(opts, client.Weight(o.weight))
	}
	if o.value != "" {
		opts = append(opts, client.Value(o.value))
	}
	return opts
}

// newHolder returns the holder of command name (lock, rlock, wlock, sem,
// multi) with its checked arguments: the key, "acquire NAME PERMITS", or
// the keys.
func newHolder(c *client.Client, name string, args []string, limit int, opts []client.Option) (holder, error) {
	switch name {
	case "lock":
		return mutexHold{c.Mutex(args[0], opts...)}, nil
	case "rlock":
		return mutexHold{c.RWMutex(args[0], opts...).Reader()}, nil
	case "wlock":
		return mutexHold{c.RWMutex(args[0], opts...).Writer()}, nil
	case "sem":
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return nil, err
		}
		return &semHold{s: c.Semaphore(args[1], limit, opts...), n: n}, nil
	}
	return &multiHold{ml: c.MultiLock(args, opts...), keys: args}, nil
}

// checkHoldArgs checks a run form's arguments (those before "--").
func checkHoldArgs(name string, args []string, limit int, limitGiven bool) error {
	switch name {
	case "lock", "rlock", "wlock":
		return wantArgs(args, 1, 1, name+" KEY -- CMD [ARG…]")
	case "sem":
		if len(args) != 3 || args[0] != "acquire" {
			return fmt.Errorf("%w: want sem acquire NAME PERMITS -limit N -- CMD [ARG…]", errUsage)
		}
		if !limitGiven || limit < 1 {
			return fmt.Errorf("%w: sem acquire: -limit N, the semaphore's total of permits (at least 1), is required", errUsage)
		}
		if n, err := strconv.Atoi(args[2]); err != nil || n < 1 || n > limit {
			return fmt.Errorf("%w: sem acquire: PERMITS %q: want 1 to -limit (%d)", errUsage, args[2], limit)
		}
		return nil
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: want multi KEY… -- CMD [ARG…]", errUsage)
	}
	for i, k := range args {
		if slices.Contains(args[:i], k) {
			return fmt.Errorf("%w: multi: key %q given twice", errUsage, k)
		}
	}
	return nil
}

// mutexHold is lock's hold, or one side of a read-write lock (rlock,
// wlock).
type mutexHold struct{ m *client.Mutex }

func (h mutexHold) take(ctx context.Context, block bool) error {
	if block {
		return h.m.Lock(ctx)
	}
	return h.m.TryLock(ctx)
}

func (h mutexHold) held() bool                        { return h.m.Held() }
func (h mutexHold) lost() <-chan struct{}             { return h.m.Lost() }
func (h mutexHold) release(ctx context.Context) error { return h.m.Unlock(ctx) }

func (h mutexHold) describe(e *holdEvent) {
	e.Key, e.Token = h.m.Key(), h.m.Token()
}

func (h mutexHold) env() []string {
	return []string{envKey + "=" + h.m.Key(), envToken + "=" + strconv.FormatUint(h.m.Token(), 10)}
}

// semHold is sem acquire's hold: n permits of a semaphore, of which
// CMD may give some back early through the socket it is told of
// (semrelease.go).
type semHold struct {
	s    *client.Semaphore
	n    int         // the permits asked
	sock *holdSocket // nil until take
}

func (h *semHold) take(ctx context.Context, block bool) error {
	var err error
	if block {
		err = h.s.Acquire(ctx, h.n)
	} else {
		err = h.s.TryAcquire(ctx, h.n)
	}
	if err != nil {
		return err
	}
	sock, err := openHoldSocket("sem", h.perform)
	if err != nil {
		_ = h.s.Release(ctx)
		return fmt.Errorf("sem acquire: the sem release socket: %w", err)
	}
	h.sock = sock
	return nil
}

func (h *semHold) held() bool            { return h.s.Held() > 0 }
func (h *semHold) lost() <-chan struct{} { return h.s.Lost() }

func (h *semHold) release(ctx context.Context) error {
	if h.sock != nil {
		h.sock.close()
	}
	return h.s.Release(ctx)
}

// describe gives the permits held now: fewer than asked once CMD gave
// some back.
func (h *semHold) describe(e *holdEvent) {
	e.Key, e.Token, e.Permits, e.Limit = h.s.Key(), h.s.Token(), h.n, h.s.Permits()
	if n := len(h.s.PermitIDs()); n > 0 {
		e.Permits = n
	}
}

func (h *semHold) env() []string {
	env := []string{envKey + "=" + h.s.Key(), envToken + "=" + strconv.FormatUint(h.s.Token(), 10),
		envPermits + "=" + strconv.Itoa(h.n)}
	if h.sock != nil {
		env = append(env, envSem+"="+h.sock.addr())
	}
	return env
}

// multiHold is multi's hold: every key of a multi-lock, each with its own
// token. keys are as given.
type multiHold struct {
	ml   *client.MultiLock
	keys []string
}

func (h *multiHold) take(ctx context.Context, block bool) error {
	if block {
		return h.ml.Lock(ctx)
	}
	return h.ml.TryLock(ctx)
}

func (h *multiHold) held() bool {
	for _, k := range h.keys {
		if !h.ml.Mutex(k).Held() {
			return false
		}
	}
	return true
}

// lost is closed when one of the keys' holds ends. Each key's hold ends
// when it is lost or released, so a key's goroutine is gone by the time
// the multi-lock is released (or the client closed).
func (h *multiHold) lost() <-chan struct{} {
	out := make(chan struct{})
	var once sync.Once
	for _, k := range h.keys {
		done := h.ml.Mutex(k).Context().Done()
		go func() {
			<-done
			once.Do(func() { close(out) })
		}()
	}
	return out
}

func (h *multiHold) release(ctx context.Context) error { return h.ml.Unlock(ctx) }

func (h *multiHold) describe(e *holdEvent) {
	e.Keys = h.keys
	if h.held() {
		e.Tokens = h.tokens()
	}
}

func (h *multiHold) tokens() []uint64 {
	toks := make([]uint64, len(h.keys))
	for i, k := range h.keys {
		toks[i] = h.ml.Token(k)
	}
	return toks
}

func (h *multiHold) env() []string {
	toks := make([]string, len(h.keys))
	for i, t := range h.tokens() {
		toks[i] = strconv.FormatUint(t, 10)
	}
	return []string{envKeys + "=" + strings.Join(h.keys, " "), envTokens + "=" + strings.Join(toks, " ")}
}

// checkWeightValue checks -weight (0: not given) and -value, so that a
// bad one is a usage error before anything is sent.
func checkWeightValue(weight int, value string) error {
	if weight != 0 && (weight < wire.MinWeight || weight > wire.MaxWeight) {
		return fmt.Errorf("%w: -weight %d: want %d to %d", errUsage, weight, wire.MinWeight, wire.MaxWeight)
	}
	if err := wire.ValidateValue(value); err != nil {
		return fmt.Errorf("%w: -value: %w", errUsage, err)
	}
	return nil
}

// checkMaxHold checks -max-hold against its limit and the hold's TTL.
func checkMaxHold(o *options) error {
	ttl := o.ttl
	if ttl <= 0 {
		ttl = client.DefaultTTL
	}
	switch {
	case o.maxHold > client.MaxHoldLimit:
		return fmt.Errorf("%w: -max-hold %v: at most %v", errUsage, o.maxHold, client.MaxHoldLimit)
	case o.maxHold > 0 && o.maxHold < ttl:
		return fmt.Errorf("%w: -max-hold %v: below the TTL %v", errUsage, o.maxHold, ttl)
	}
	return nil
}
