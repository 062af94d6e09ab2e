package load

import (
	"context"
	"errors"
	"time"
)

// Mode says which kind of lock a request takes.
type Mode uint8

const (
	// Exclusive is a plain mutex.
	Exclusive Mode = iota
	// Write is the exclusive side of a read-write lock. Read and Write
	// requests on one key belong to the same read-write lock; a key is never
	// used both as a plain mutex and as a read-write lock.
	Write
	// Read is the shared side of a read-write lock.
	Read
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Write:
		return "write"
	case Read:
		return "read"
	}
	return "mode?"
}

// Request describes one acquire.
type Request struct {
	// Key names the lock. It is a plain string of [A-Za-z0-9/_-], so adapters
	// can map it to a Redis key, an etcd prefix or a znode path as they like.
	Key string
	// Mode is Exclusive, Write or Read.
	Mode Mode
	// TTL is how long the lock lives unless renewed or released. Systems whose
	// locks live as long as a session (etcd, ZooKeeper) take the TTL when the
	// session is made and ignore this field.
	TTL time.Duration
	// Fresh says the key was never used before and will never be used again.
	// A system whose lock recipe leaves per-key state behind (the ZooKeeper
	// recipe's parent znode) should remove it on release, as a real user of
	// ever-new keys has to.
	Fresh bool
}

// Lease is a granted lock, handed back to Renew and Release.
type Lease struct {
	// Key and Mode repeat the request.
	Key  string
	Mode Mode
	// Token is the system's fencing token, strictly increasing per key across
	// holders, or 0 if the system has none. The guard checks that tokens of
	// one key never go backwards.
	Token uint64
	// Fresh repeats Request.Fresh.
	Fresh bool
	// Handle is the adapter's own state (owner value, mutex object, node path).
	Handle any
}

// Caps tells what a system supports, so that scenarios it cannot run are
// reported as "n/a" instead of being faked.
type Caps struct {
	// Renew: a held lock's TTL can be extended.
	Renew bool
	// ReadWrite: Read and Write modes are supported.
	ReadWrite bool
	// Fencing: Lease.Token is a fencing token.
	Fencing bool
	// Wait describes how a blocked acquire waits, for the report
	// (e.g. "server push", "client polling every 2ms").
	Wait string
	// Notes are caveats the report should print next to the system.
	Notes []string
	// CommandsPerLock and CommandsPerRenew are the replicated commands that
	// an acquire + release of a fresh key, and a renew, commit (0: the
	// adapter does not state it). The report divides CPU per op by them.
	CommandsPerLock, CommandsPerRenew int
}

// CommandsPerOp is how many replicated commands one op of sc commits
// according to c, or 0 when that is not known. Only fresh-key scenarios
// count: on a hot key a waiter's grant may ride on the holder's release, so
// an op there commits fewer commands than an uncontended one.
func (c Caps) CommandsPerOp(sc Scenario) int {
	if c.CommandsPerLock <= 0 || sc.Hot() {
		return 0
	}
	n := c.CommandsPerLock
	if sc.Kind == RenewHeavy {
		if c.CommandsPerRenew <= 0 {
			return 0
		}
		n += sc.Renews * c.CommandsPerRenew
	}
	return n
}

// Locker is one lock service under test. Implementations are safe for
// concurrent use by many workers.
type Locker interface {
	// Name is the short name used on the command line ("redis", "etcd", "zk",
	// "paxlock"); Display is the name for humans ("Redis", "ZooKeeper").
	Name() string
	Display() string
	// Caps tells what the system supports.
	Caps() Caps
	// Version asks the server for its version.
	Version(ctx context.Context) (string, error)
	// NewSession makes the client state one worker uses for the whole run: a
	// connection, a lease or ZooKeeper session, a client handle. Sessions are
	// never shared between workers.
	NewSession(ctx context.Context, worker int) (Session, error)
	// Close releases everything the Locker holds.
	Close() error
}

// Session takes and gives back locks for one worker; it is used by one
// goroutine at a time.
type Session interface {
	// Acquire takes the lock, waiting while another holder has it (the wait
	// may happen on the server) until ctx is done; then it returns ctx.Err()
	// (possibly wrapped) and holds nothing.
	Acquire(ctx context.Context, req Request) (Lease, error)
	// Renew extends a held lock by ttl. Systems without Caps.Renew return
	// ErrUnsupported.
	Renew(ctx context.Context, l Lease, ttl time.Duration) error
	// Release gives the lock back. It returns an error wrapping ErrNotHeld if
	// the system says the lease was no longer the holder.
	Release(ctx context.Context, l Lease) error
	// Close ends the session (revoking its lease or closing its connection,
	// bounded by ctx); locks it still holds are freed or expire.
	Close(ctx context.Context) error
}

// Errors adapters wrap (with %w) so that failures are counted by kind.
var (
	// ErrNotHeld: the lease no longer held the lock (expired, taken over).
	ErrNotHeld = errors.New("lock not held")
	// ErrUnsupported: the system has no such operation.
	ErrUnsupported = errors.New("not supported by this system")
	// ErrUnavailable: the service could not be reached or had no quorum.
	ErrUnavailable = errors.New("service unavailable")
	// ErrNotBuilt: the adapter is a placeholder for a client that does not
	// exist yet; the suite skips such a system and says so in the report.
	ErrNotBuilt = errors.New("adapter not built yet")
)
