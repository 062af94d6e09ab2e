package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// Sentinel errors. Every error the package returns wraps at most a few of
// these (and the context's error when a context ended), so callers test
// them with errors.Is; errors.As with *LockedError or *StatusError gives the
// details the server sent.
var (
	// ErrLocked reports that TryLock (or TryRLock) found the key held by
	// another owner. The error is a *LockedError naming the holder.
	ErrLocked = errors.New("client: lock held by another owner")

	// ErrNotHeld reports an Unlock, RUnlock or Renew on a handle that does
	// not hold its lock (it was never locked, or already fully unlocked).
	// Nothing was sent to the server.
	ErrNotHeld = errors.New("client: lock not held by this handle")

	// ErrNotLeader reports a Proclaim by an Election that is not the
	// leader (it never won, resigned, or lost leadership). It wraps
	// ErrNotHeld.
	ErrNotLeader = fmt.Errorf("client: not the leader: %w", ErrNotHeld)

	// ErrNoLeader reports that an election has no leader right now.
	ErrNoLeader = errors.New("client: election has no leader")

	// ErrLockLost reports that a lock the handle held is gone: its TTL ran
	// out on the client's clock without a successful renewal, the server
	// said it expired or was revoked (a Lost push), or a renew or release
	// was answered LOCK_DELETED, LOCK_CHANGED_OWNER or TOKEN_ERROR. Work done
	// under the lock may have overlapped another holder's; use the fencing
	// token to make that harmless.
	ErrLockLost = errors.New("client: lock lost")

	// ErrHoldLimit reports that a lock reached its maximum hold time
	// (the MaxHold option): the client stopped trusting it at its send
	// time plus the bound, or the server ended it (a Lost push with
	// EventHoldLimit), renewals or not. It wraps ErrLockLost.
	ErrHoldLimit = fmt.Errorf("%w: maximum hold time reached", ErrLockLost)

	// ErrAuth reports that the cluster refused the namespace or secret
	// (AUTH_FAILED). Retrying with the same configuration will not help.
	// A node that refuses a namespace after the client's registry
	// accepted it (the namespace was just added, or moved to the node's
	// cluster, and the node has not applied it yet) is retried like an
	// unavailable one, within MaxRetries, before a call returns ErrAuth.
	ErrAuth = errors.New("client: authentication failed")

	// ErrClosed reports a call on a closed Client, or a wait that ended
	// because the Client was closed.
	ErrClosed = errors.New("client: closed")

	// ErrTimeout reports a wait that ran out: a blocking Lock's MaxWait (or
	// the context deadline the server was told about) passed in the queue,
	// or the cluster answered TIMEOUT or did not answer in time on every
	// attempt.
	ErrTimeout = errors.New("client: timed out")

	// ErrNoMaster reports that the key's group had no reachable master on
	// every attempt (an election was under way, or redirects did not
	// settle).
	ErrNoMaster = errors.New("client: no master for the key's group")

	// ErrOverloaded reports that the server refused the request to protect
	// itself (OVERLOADED) on every attempt, or that a connection's send
	// queue was full.
	ErrOverloaded = errors.New("client: server overloaded")

	// ErrUnavailable reports that no node could be reached, or connections
	// broke on every attempt.
	ErrUnavailable = errors.New("client: cluster unavailable")

	// ErrMoving reports that the key's namespace was being moved to
	// another cluster (MOVING) on every attempt until the caller's
	// context ended, or that it moved (MOVED) and the client could not
	// reach the cluster it moved to.
	ErrMoving = errors.New("client: the namespace is moving to another cluster")

	// ErrInvalid reports a bad argument detected on the client (empty or
	// over-long key, weight out of range, bad TTL, bad configuration);
	// nothing was sent. Where the wire package has a more precise error
	// (wire.ErrInvalidKey, wire.ErrInvalidWeight...) the error wraps it too.
	ErrInvalid = errors.New("client: invalid argument")

	// ErrBadRequest reports that the server refused a request as invalid
	// (BAD_REQUEST), for example a TTL outside the server's bounds. The
	// *StatusError's Msg says why. Fix the call; do not retry.
	ErrBadRequest = errors.New("client: request refused as invalid")

	// ErrServer reports a server-side failure (ERROR, or a status this
	// client does not know).
	ErrServer = errors.New("client: server error")
)

// LockedError is the error TryLock returns when another owner holds the
// key, or when the key is in a lock-delay (see LockDelay: Holder is then
// zero and RetryAfter says for how long). It wraps ErrLocked.
type LockedError struct {
	// Key is the lock's key.
	Key string
	// Holder is the current holder (for a read lock, one of the readers);
	// zero when the key is free but in a lock-delay.
	Holder wire.Owner
	// Token is the holder's fencing token.
	Token uint64
	// Kind is the held lock's kind.
	Kind wire.Kind
	// TTLLeft is how long the holder's lock has left, as the master sees it.
	TTLLeft time.Duration
	// QueueLen is the number of waiters queued on the key.
	QueueLen int
	// Value is the holder's value (see the Value option), "" for none.
	Value string
	// Permits and InUse are, for a semaphore, its permit total and the
	// permits held (Holder is then one of the holders).
	Permits, InUse int
	// RetryAfter, when not 0, is what is left of the key's lock-delay
	// as the master saw it: nobody new is granted the key before then.
	RetryAfter time.Duration
}

// Error describes the holder.
func (e *LockedError) Error() string {
	if e.Holder.IsZero() && e.RetryAfter > 0 {
		return fmt.Sprintf("client: lock %q in its lock-delay for another %v (%d queued)", e.Key, e.RetryAfter, e.QueueLen)
	}
	s := fmt.Sprintf("client: lock %q held by %v (token %d, %s, ttl left %v, %d queued",
		e.Key, e.Holder, e.Token, e.Kind, e.TTLLeft, e.QueueLen)
	if e.Kind == wire.KindSemaphore {
		s += fmt.Sprintf(", %d of %d permits in use", e.InUse, e.Permits)
	}
	if e.Value != "" {
		s += fmt.Sprintf(", value %.64q", e.Value)
	}
	return s + ")"
}

// Unwrap returns ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// StatusError is a request the server answered with a status the call
// could not turn into success. It wraps the sentinel that status maps to
// (see Unwrap).
type StatusError struct {
	// Op is the operation: "lock", "unlock", "renew", "state", "watch"...
	Op string
	// Key is the lock's key.
	Key string
	// Status is the server's answer.
	Status wire.Status
	// Msg is the server's human-readable detail, if any.
	Msg string
}

// Error describes the failed operation.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("client: %s %q: %s", e.Op, e.Key, e.Status)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Unwrap maps the status to a sentinel: LOCK_DELETED, LOCK_CHANGED_OWNER,
// TOKEN_ERROR and REVOKED to ErrLockLost; LOCK_OCCUPIED to ErrLocked; TIMEOUT to
// ErrTimeout; NO_MASTER and MASTER_REDIRECT to ErrNoMaster; OVERLOADED to
// ErrOverloaded; AUTH_FAILED to ErrAuth; BAD_REQUEST to ErrBadRequest;
// MOVING and MOVED to ErrMoving; anything else to ErrServer.
func (e *StatusError) Unwrap() error { return statusSentinel(e.Status) }

func statusSentinel(s wire.Status) error {
	switch s {
	case wire.StatusLockDeleted, wire.StatusLockChangedOwner, wire.StatusTokenError, wire.StatusRevoked:
		return ErrLockLost
	case wire.StatusLockOccupied:
		return ErrLocked
	case wire.StatusTimeout:
		return ErrTimeout
	case wire.StatusNoMaster, wire.StatusMasterRedirect:
		return ErrNoMaster
	case wire.StatusOverloaded:
		return ErrOverloaded
	case wire.StatusAuthFailed:
		return ErrAuth
	case wire.StatusBadRequest:
		return ErrBadRequest
	case wire.StatusMoving, wire.StatusMoved:
		return ErrMoving
	}
	return ErrServer
}

func statusErr(op, key string, r *wire.Response) error {
	return &StatusError{Op: op, Key: key, Status: r.Status, Msg: r.Msg}
}

// lostStatus reports whether a renew or release status means the caller
// no longer holds the lock.
func lostStatus(s wire.Status) bool {
	return s == wire.StatusLockDeleted || s == wire.StatusLockChangedOwner || s == wire.StatusTokenError || s == wire.StatusRevoked
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// validKey checks a lock key on the client, wrapping both ErrInvalid and
// wire's precise error.
func validKey(key string) error {
	if err := wire.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// errConnLost is the internal cause of a request that failed because its
// connection broke; callers see ErrUnavailable after the retries.
var errConnLost = errors.New("connection lost")

// errAttemptTimeout is one attempt's RequestTimeout passing.
var errAttemptTimeout = errors.New("no reply within the request timeout")

// lockedErr is the *LockedError of an acquire answered LOCK_OCCUPIED.
func (m *Mutex) lockedErr(r *wire.Response) error {
	return &LockedError{
		Key: m.key, Holder: r.Holder, Token: r.Token, Kind: r.Kind,
		TTLLeft: time.Duration(r.TTLLeftMs) * time.Millisecond, QueueLen: int(r.QueueLen),
		Value: r.Value, Permits: int(r.Permits), InUse: int(r.InUse),
		RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond,
	}
}

// timeoutErr is the error of a blocking acquire whose wait ran out: by
// ctx's deadline when byCtx, else by MaxWait.
func (m *Mutex) timeoutErr(byCtx bool) error {
	if byCtx {
		return fmt.Errorf("client: lock %q: %w: %w", m.key, ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("client: lock %q: %w: MaxWait %v passed", m.key, ErrTimeout, m.opts.maxWait)
}
