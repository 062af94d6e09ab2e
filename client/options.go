package client

import (
	"fmt"
	"math"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// DefaultTTL is a lock's TTL when no TTL option is given.
const DefaultTTL = 30 * time.Second

// maxTTLField is the longest duration a uint32 millisecond field can carry (about
// 49 days); wire.WaitForever is one above it.
const maxTTLField = time.Duration(math.MaxUint32-1) * time.Millisecond

// Option configures a lock handle (Mutex, RWMutex, Election) or a watch.
// Options that do not apply to a call are ignored. An invalid option (a
// weight out of range, a negative TTL) does not panic: every method of the
// handle, or Watch, returns an error wrapping ErrInvalid.
type Option func(*options)

type options struct {
	ttl          time.Duration
	autoRenew    bool
	weight       uint8
	maxWait      time.Duration
	processOwner bool
	continuous   bool
	value        string
	onTrouble    func(RenewTrouble)
	lockDelay    time.Duration // see LockDelay
	maxHold      time.Duration // see MaxHold
	err          error
}

func buildOptions(opts []Option) options {
	o := options{ttl: DefaultTTL, weight: wire.DefaultWeight}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.maxHold > 0 && o.maxHold < o.ttl {
		o.fail(invalid("MaxHold %v below the TTL %v", o.maxHold, o.ttl))
	}
	return o
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// TTL sets how long the lock lives on the server without a renewal
// (default DefaultTTL). The server clamps it to its own bounds; the client
// uses the smaller of the two when it counts the lock's validity. d must be
// positive and at most about 49 days.
func TTL(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 || d > maxTTLField {
			o.fail(invalid("TTL %v not in (0, %v]", d, maxTTLField))
			return
		}
		if d < time.Millisecond {
			d = time.Millisecond
		}
		o.ttl = d
	}
}

// AutoRenew makes the client renew the lock every TTL/3 while it is held,
// in the background, until Unlock or until the lock is lost. A renewal
// that keeps failing until the lock's validity runs out closes Lost.
func AutoRenew() Option {
	return func(o *options) { o.autoRenew = true }
}

// OnRenewTrouble calls f each time an automatic renewal (AutoRenew) fails
// while the lock is still valid: the client retries until the validity
// runs out, and only then closes Lost, so f is the early warning (a slow
// or unreachable master) that lets the caller wind its work down before
// the lock is lost. f runs on the renewal's goroutine and must not block
// for long. Each such failure is also logged at Warn.
func OnRenewTrouble(f func(RenewTrouble)) Option {
	return func(o *options) { o.onTrouble = f }
}

// Weight sets the waiter's priority in the server's queue, wire.MinWeight
// (1, the default) to wire.MaxWeight (10). A freed lock goes to the
// waiter whose arrival time minus weight × the server's weight_aging
// (default 1s) is earliest: each unit of weight counts as that much
// waiting, so a weight-10 waiter goes ahead of weight-1 waiters that came
// less than 9s before it, and nobody waits forever behind a stream of
// heavier arrivals.
func Weight(w int) Option {
	return func(o *options) {
		if w < wire.MinWeight || w > wire.MaxWeight {
			o.fail(invalid("weight %d not in %d..%d: %w", w, wire.MinWeight, wire.MaxWeight, wire.ErrInvalidWeight))
			return
		}
		o.weight = uint8(w)
	}
}

// MaxWait bounds how long a blocking Lock waits in the server's queue (the
// context's deadline bounds it too; the earlier one wins); when it passes,
// Lock returns an error wrapping ErrTimeout. For Watch it bounds the
// watch's life: the last event is then an EventTimeout. Zero (the default)
// means no bound beyond the context. d must not be negative.
func MaxWait(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.fail(invalid("MaxWait %v is negative", d))
			return
		}
		o.maxWait = min(d, maxTTLField)
	}
}

// ProcessOwner makes the handle's owner the whole Client (like WLock's
// process lock) instead of the handle: every ProcessOwner handle for the
// same key and kind shares one hold and one reentrancy count, so a lock
// taken through one may be extended or released through another. By
// default each handle is its own owner.
func ProcessOwner() Option {
	return func(o *options) { o.processOwner = true }
}

// Value attaches a holder value to the handle's grants: up to
// wire.MaxValueLen (1 KiB) of anything the application wants contenders
// and observers to see (host, pid, job id...). It is returned by State, in
// a contender's *LockedError and in watch events; Mutex.SetValue changes
// it while the lock is held. A longer value makes every method of the
// handle return an error wrapping ErrInvalid and wire.ErrValueTooLarge;
// nothing is sent.
func Value(v string) Option {
	return func(o *options) {
		if err := wire.ValidateValue(v); err != nil {
			o.fail(fmt.Errorf("%w: %w", ErrInvalid, err))
			return
		}
		o.value = v
	}
}

// Continuous makes a Watch keep reporting after its first event, until
// Close, MaxWait or the Client's Close. Without it a watch ends (its
// channel closes) after one event.
func Continuous() Option {
	return func(o *options) { o.continuous = true }
}

// MaxLockDelay is the longest lock-delay the LockDelay option accepts:
// one minute (wire.MaxLockDelayMs).
const MaxLockDelay = time.Duration(wire.MaxLockDelayMs) * time.Millisecond

// LockDelay gives the handle's grants a lock-delay (Chubby's lock-delay,
// Consul's LockDelay): when the lock is freed involuntarily — its TTL ran
// out on the server (the holder crashed, paused or lost the cluster), or
// an operator force-unlocked it — the server grants the key to nobody
// else for d, so that a holder that lost the lock without knowing has
// time to stop touching the resource before the next holder starts. It is
// for resources that cannot check a fencing token; one that can should
// check the token instead (see Client.CheckToken), which costs no wait.
// Unlock frees the key at once, without a delay.
//
// During the delay TryLock returns a *LockedError with a zero Holder and
// RetryAfter set to what is left; Lock waits in the queue and is granted
// when the delay ends. The delay is replicated with the lock: a new
// master gives it in full from the moment it takes over (it cannot know
// when its predecessor started it), so the wait may be longer, never
// shorter. It applies to Mutex, RWMutex, Semaphore and Election handles
// (MultiLock ignores it). d must be in [0, MaxLockDelay]; 0, the default,
// is no delay. A server that predates the option ignores it.
func LockDelay(d time.Duration) Option {
	return func(o *options) {
		if d < 0 || d > MaxLockDelay {
			o.fail(invalid("LockDelay %v not in [0, %v]", d, MaxLockDelay))
			return
		}
		o.lockDelay = d
	}
}

// MaxHoldLimit is the longest maximum hold time the MaxHold option
// accepts: 24 hours (wire.MaxHoldLimitMs).
const MaxHoldLimit = time.Duration(wire.MaxHoldLimitMs) * time.Millisecond

// MaxHold bounds how long the handle's grants may be held, renewed or not,
// so that a stuck process that keeps renewing (AutoRenew) cannot hold a
// lock for ever. The master ends the hold d after it granted it, as it
// ends an expired one (the key's LockDelay applies), and pushes the loss;
// the client stops renewing and treats the hold as lost no later than the
// acquire's send time plus d (less the clock-drift margin it gives TTLs),
// so Lost closes, ValidUntil never passes that moment, and Unlock and
// renewals then return an error wrapping ErrHoldLimit (and ErrLockLost).
// A new master counts a full d from its takeover (it cannot know when the
// grant was), so the server's bound may come later, never sooner.
// Watchers see the end as EventHoldLimit.
//
// d must be in [0, MaxHoldLimit] and, when set, at least the TTL (the
// acquire is refused with ErrInvalid otherwise); the server raises a
// bound below the TTL it applies to that TTL. 0, the default, is no
// bound. It applies to Mutex, RWMutex, Semaphore and Election handles
// (MultiLock ignores it; a hold handed on between a Client's own waiters
// is bounded by the client alone). A server that predates the option
// ignores it; the client's own bound still holds.
func MaxHold(d time.Duration) Option {
	return func(o *options) {
		if d < 0 || d > MaxHoldLimit {
			o.fail(invalid("MaxHold %v not in [0, %v]", d, MaxHoldLimit))
			return
		}
		o.maxHold = d
	}
}
