package client

import (
	"time"

	"github.com/paxlock/paxlock/wire"
)

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

// lockDelayMs converts a lock-delay into Acquire.LockDelayMs, rounding
// up: a delay is never shortened.
func lockDelayMs(d time.Duration) uint32 {
	return uint32(min((d+time.Millisecond-1)/time.Millisecond, wire.MaxLockDelayMs))
}
