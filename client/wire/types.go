package wire

import "strconv"

// Type is a frame's message type. Its top two bits tell the class: 0x00–0x3F
// requests (client to server), 0x40–0x7F replies, 0x80–0xBF pushes.
type Type uint8

// Requests. Each is answered by exactly one reply frame carrying the
// request's id: a Response, or for GetView and SubscribeView a View (or a
// Response if the request failed).
const (
	// TypeHello opens a session: body Hello, reply Response.
	TypeHello Type = 0x01
	// TypeAcquire takes a lock: body Acquire, reply Response.
	TypeAcquire Type = 0x02
	// TypeRenew extends a held lock: body Renew, reply Response.
	TypeRenew Type = 0x03
	// TypeRelease frees a held lock: body Release, reply Response.
	TypeRelease Type = 0x04
	// TypeState asks for a key's holder, token, TTL and queue: body State,
	// reply Response.
	TypeState Type = 0x05
	// TypeWatch registers interest in a key's changes: body Watch, reply
	// Response, then WatchEvent pushes.
	TypeWatch Type = 0x06
	// TypeUnwatch drops a watch: body Unwatch, reply Response.
	TypeUnwatch Type = 0x07
	// TypeCancelWait leaves a key's wait queue: body CancelWait, reply
	// Response.
	TypeCancelWait Type = 0x08
	// TypeHeartbeat keeps the connection alive: body Heartbeat, reply
	// Response carrying the server's view version.
	TypeHeartbeat Type = 0x09
	// TypeGetView asks for the cluster view: body GetView, reply View.
	TypeGetView Type = 0x0A
	// TypeSubscribeView asks for the cluster view and for every later one:
	// body SubscribeView, reply View, then ViewChanged pushes.
	TypeSubscribeView Type = 0x0B
	// TypeList lists the held locks of one lock group, sent to its master:
	// body List, reply Response with Locks.
	TypeList Type = 0x0C
	// TypeScramClientFirst opens a session with SCRAM-SHA-256: body
	// ScramClientFirst, reply ScramServerFirst (or Response AUTH_FAILED).
	TypeScramClientFirst Type = 0x0D
	// TypeScramClientFinal completes it: body ScramClientFinal, reply
	// ScramServerFinal (or Response AUTH_FAILED).
	TypeScramClientFinal Type = 0x0E
	// TypeMultiAcquire takes exclusive locks on several keys of one lock
	// group in one Paxos command, all or none: body MultiAcquire, reply
	// Response (with Tokens).
	TypeMultiAcquire Type = 0x0F
	// TypeSubscribeRegistry asks a meta cluster's node for the registry's
	// tables and every later change (registry processes only): body
	// SubscribeRegistry, reply RegistryTables, then RegistryChanged
	// pushes.
	TypeSubscribeRegistry Type = 0x10
)

// Replies; their request id is the request's.
const (
	// TypeResponse is the reply to every request except a successful
	// GetView or SubscribeView: body Response.
	TypeResponse Type = 0x40
	// TypeView is the reply to GetView and SubscribeView: body View.
	TypeView Type = 0x41
	// TypeScramServerFirst is the reply to ScramClientFirst: body
	// ScramServerFirst.
	TypeScramServerFirst Type = 0x42
	// TypeScramServerFinal is the reply to an accepted ScramClientFinal:
	// body ScramServerFinal.
	TypeScramServerFinal Type = 0x43
	// TypeRegistryTables is the reply to SubscribeRegistry: body
	// RegistryTables.
	TypeRegistryTables Type = 0x44
)

// Pushes; their request id is 0 and their body names what they are about
// (a wait id, a watch id, a key).
const (
	// TypeGranted tells a waiter its blocking acquire ended: body Granted.
	TypeGranted Type = 0x80
	// TypeLost tells a holder its lock is gone: body Lost.
	TypeLost Type = 0x81
	// TypeWatchEvent tells a watcher its key changed: body WatchEvent.
	TypeWatchEvent Type = 0x82
	// TypeViewChanged carries a new cluster view to subscribers: body View.
	TypeViewChanged Type = 0x83
	// TypeRegistryChanged carries the registry's tables to subscribers
	// after a change: body RegistryTables.
	TypeRegistryChanged Type = 0x84
)

// IsRequest reports whether t is in the request range.
func (t Type) IsRequest() bool { return t < 0x40 }

// IsReply reports whether t is in the reply range.
func (t Type) IsReply() bool { return t >= 0x40 && t < 0x80 }

// IsPush reports whether t is in the push range.
func (t Type) IsPush() bool { return t >= 0x80 && t < 0xC0 }

// Known reports whether t is a type this version of the protocol defines.
func (t Type) Known() bool { return typeNames[t] != "" }

var typeNames = [256]string{
	TypeHello:            "Hello",
	TypeAcquire:          "Acquire",
	TypeRenew:            "Renew",
	TypeRelease:          "Release",
	TypeState:            "State",
	TypeWatch:            "Watch",
	TypeUnwatch:          "Unwatch",
	TypeCancelWait:       "CancelWait",
	TypeHeartbeat:        "Heartbeat",
	TypeGetView:          "GetView",
	TypeSubscribeView:    "SubscribeView",
	TypeList:             "List",
	TypeScramClientFirst: "ScramClientFirst",
	TypeScramClientFinal: "ScramClientFinal",
	TypeMultiAcquire:     "MultiAcquire",
	TypeScramServerFirst: "ScramServerFirst",
	TypeScramServerFinal: "ScramServerFinal",
	TypeResponse:         "Response",
	TypeView:             "View",
	TypeGranted:          "Granted",
	TypeLost:             "Lost",
	TypeWatchEvent:       "WatchEvent",
	TypeViewChanged:      "ViewChanged",

	TypeSubscribeRegistry: "SubscribeRegistry",
	TypeRegistryTables:    "RegistryTables",
	TypeRegistryChanged:   "RegistryChanged",
}

// String returns the type's name, or Type(0xNN) for an unknown type.
func (t Type) String() string {
	if s := typeNames[t]; s != "" {
		return s
	}
	return "Type(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// Status is a reply's outcome. The numbering follows WLock's where the two
// share a meaning (7, WLock's unused PROPOSE_FAIL, is skipped). A receiver
// must treat a status it does not know as StatusError.
type Status uint8

// Status codes.
const (
	// StatusSuccess: the request did what it asked. For Acquire the lock is
	// held and Response.Token is its fencing token; for Granted the wait
	// ended with the lock held.
	StatusSuccess Status = 0
	// StatusTimeout: the operation did not finish in time. Clients
	// synthesize it when a reply does not arrive; a server sends it in
	// Granted when a waiter's MaxWaitMs ran out, and in Response when it
	// cannot know a proposal's outcome (not committed in time, or the node
	// stopped or failed its storage with it in flight, when another master
	// may still choose it): query State before assuming either. Retryable.
	StatusTimeout Status = 1
	// StatusError: the server failed in a way not covered by another code
	// (storage failure, a bug). Response.Msg may say more. Not retryable
	// blindly.
	StatusError Status = 2
	// StatusLockOccupied: a try-lock (MaxWaitMs 0) found the key held by
	// another owner. Response carries the holder, its token, TTL left and
	// the queue length.
	StatusLockOccupied Status = 3
	// StatusLockDeleted: Renew, Release or State found no lock on the key:
	// it expired, was released, or never existed.
	StatusLockDeleted Status = 4
	// StatusLockChangedOwner: Renew or Release came from an owner that does
	// not hold the key (another owner does). Nothing changed; the caller
	// must assume it lost the lock.
	StatusLockChangedOwner Status = 5
	// StatusMasterRedirect: this node is not the master of the key's group.
	// Response.Redirect is the master's client address (empty if the node
	// does not know it). Retry there and refresh the view.
	StatusMasterRedirect Status = 6
	// StatusTokenError: Renew or Release named the right owner but a token
	// that is not the lock's current one (a stale handle). Nothing changed.
	StatusTokenError Status = 8
	// StatusLockWait: a blocking acquire found the key held and was queued;
	// the outcome comes later as a Granted push with the request's WaitID.
	// Response.QueueLen is the queue length including this waiter.
	StatusLockWait Status = 9
	// StatusAuthFailed: the connection has no accepted Hello, or the Hello
	// named an unknown namespace or a wrong secret. A request on such a
	// connection changes nothing.
	StatusAuthFailed Status = 10
	// StatusBadRequest: the request did not decode or failed validation
	// (empty key, weight out of range, unknown type, TTL outside the
	// server's bounds...). Response.Msg says which. Fix the caller; do not
	// retry.
	StatusBadRequest Status = 11
	// StatusOverloaded: the server refused the request to protect itself
	// (queues full, rate limit). Nothing changed. Retry after
	// Response.RetryAfterMs.
	StatusOverloaded Status = 12
	// StatusNoMaster: the key's group has no master right now (an election
	// is under way). Nothing changed. Retry after Response.RetryAfterMs,
	// refreshing the view.
	StatusNoMaster Status = 13
	// StatusRevoked: Renew (or a reentrant Acquire) named a hold an
	// operator has force-unlocked. The caller has lost the lock and should
	// acknowledge with a Release of the token: the master frees a revoked
	// key once its holder released it or its deadline passed, whichever
	// comes first, so that the holder stops believing before anyone else
	// is granted the key.
	StatusRevoked Status = 14
	// StatusMoving: the key's namespace is being moved to another
	// cluster (docs/design.md, "Moving a namespace"): this cluster
	// changes nothing of it until the move ends or is aborted. Nothing
	// changed. Retry after Response.RetryAfterMs. A blocked acquire's
	// Granted with it means the wait left the queue: send the Acquire
	// again (same WaitID), as after NO_MASTER. Retryable.
	StatusMoving Status = 15
	// StatusMoved: the key's namespace is served by another cluster.
	// Nothing changed. Response.Redirect lists that cluster's client
	// addresses, comma-separated (host:port,host:port), empty when this
	// node does not know them: refresh the view from the registry, and
	// use those addresses as seeds if the registry still names this
	// cluster. Not retryable here; the same request may succeed there.
	StatusMoved Status = 16
)

var statusNames = [256]string{
	StatusSuccess:          "SUCCESS",
	StatusTimeout:          "TIMEOUT",
	StatusError:            "ERROR",
	StatusLockOccupied:     "LOCK_OCCUPIED",
	StatusLockDeleted:      "LOCK_DELETED",
	StatusLockChangedOwner: "LOCK_CHANGED_OWNER",
	StatusMasterRedirect:   "MASTER_REDIRECT",
	StatusTokenError:       "TOKEN_ERROR",
	StatusLockWait:         "LOCK_WAIT",
	StatusAuthFailed:       "AUTH_FAILED",
	StatusBadRequest:       "BAD_REQUEST",
	StatusOverloaded:       "OVERLOADED",
	StatusNoMaster:         "NO_MASTER",
	StatusRevoked:          "REVOKED",
	StatusMoving:           "MOVING",
	StatusMoved:            "MOVED",
}

// String returns the status's protocol name, such as LOCK_OCCUPIED, or
// Status(N) for an unknown status.
func (s Status) String() string {
	if n := statusNames[s]; n != "" {
		return n
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Known reports whether s is a status this version of the protocol defines.
func (s Status) Known() bool { return statusNames[s] != "" }

// Retryable reports whether the same request may succeed if sent again
// later, possibly to another node, without the caller changing anything:
// TIMEOUT, MASTER_REDIRECT, OVERLOADED, NO_MASTER and MOVING.
func (s Status) Retryable() bool {
	switch s {
	case StatusTimeout, StatusMasterRedirect, StatusOverloaded, StatusNoMaster, StatusMoving:
		return true
	}
	return false
}

// Kind is a lock's kind. A key is used either as a mutex (KindExclusive)
// or as a read-write lock (KindRead and KindWrite), not both.
type Kind uint8

// Lock kinds.
const (
	// KindExclusive is a plain mutex: one holder.
	KindExclusive Kind = 0
	// KindRead is the shared side of a read-write lock: many readers, no
	// writer.
	KindRead Kind = 1
	// KindWrite is the exclusive side of a read-write lock: one writer, no
	// readers. Waiting writers are preferred over new readers.
	KindWrite Kind = 2
	// KindSemaphore is a counting semaphore: holders take permits (Acquire
	// Permits) out of a total (Acquire Limit) until none are left.
	KindSemaphore Kind = 3
)

// Valid reports whether k is a defined kind.
func (k Kind) Valid() bool { return k <= KindSemaphore }

// String returns exclusive, read, write, or Kind(N).
func (k Kind) String() string {
	switch k {
	case KindExclusive:
		return "exclusive"
	case KindRead:
		return "read"
	case KindWrite:
		return "write"
	case KindSemaphore:
		return "semaphore"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Event says what happened to a key, in WatchEvent and Lost pushes.
type Event uint8

// Events. Zero is not an event.
const (
	// EventAcquired: the key was granted with a token above the watched one.
	EventAcquired Event = 1
	// EventReleased: the lock was released by its holder.
	EventReleased Event = 2
	// EventExpired: the lock's TTL ran out without a renewal.
	EventExpired Event = 3
	// EventRevoked: the lock was removed by other means (an operator, a
	// namespace being dropped).
	EventRevoked Event = 4
	// EventTimeout: a watch's MaxWaitMs ran out with no change; the watch is
	// gone.
	EventTimeout Event = 5
	// EventMoved: the watch's master stopped serving it (it stepped down,
	// or the watch's namespace left it); the watch is gone from that
	// master. It is no change of the key: a client registers the watch
	// again, from the last token it knows of, at the key's current master
	// (refreshing its view first when the answer is NO_MASTER or
	// MASTER_REDIRECT), and never reports the event to its user.
	EventMoved Event = 6
	// EventHoldLimit: the hold reached its maximum hold time
	// (Acquire.MaxHoldMs) and the master ended it, renewals or not; the
	// key's lock-delay applies as for any involuntary end. A holder hears
	// it in a Lost push, watchers as a revocation of this cause.
	EventHoldLimit Event = 7
)

// String returns the event's name, or Event(N).
func (e Event) String() string {
	switch e {
	case EventAcquired:
		return "acquired"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventRevoked:
		return "revoked"
	case EventTimeout:
		return "timeout"
	case EventMoved:
		return "moved"
	case EventHoldLimit:
		return "hold-limit"
	}
	return "Event(" + strconv.Itoa(int(e)) + ")"
}

// Flags modify a request. Bits a receiver does not know are ignored.
type Flags uint8

// Flag bits.
const (
	// FlagReentrant (Acquire) is informational: the server always treats
	// an Acquire by the Owner that already holds the key in the same kind
	// as a reacquire, which succeeds at once with the same token and a
	// refreshed TTL. That also makes a re-sent Acquire harmless. Counting
	// reentrant holds is the client's business (per handle).
	FlagReentrant Flags = 1 << 0
	// FlagContinuous (Watch): keep the watch after its first event, until
	// Unwatch or MaxWaitMs.
	FlagContinuous Flags = 1 << 1
	// FlagDowngrade (Acquire, Kind read, never blocking): the Owner holds
	// the key for writing; turn that hold into a read hold, atomically —
	// no other writer can take the key in between. The token stays, the
	// TTL is refreshed, queued readers may then be granted and waiting
	// writers stay queued. Idempotent: if the Owner already holds the key
	// for reading, SUCCESS. LOCK_CHANGED_OWNER (or LOCK_DELETED) if it
	// holds nothing; BAD_REQUEST if its hold is exclusive (a Mutex's, not
	// a read-write lock's). A server that predates the flag ignores it
	// and answers as for a try-lock of the read side: LOCK_OCCUPIED.
	FlagDowngrade Flags = 1 << 2
	// FlagSetPermits (Acquire, Kind semaphore, never blocking): set the
	// semaphore's permit total to Limit; no permit is taken. While the
	// semaphore has holders the new total is replicated (lowering it below
	// the permits in use keeps the holders and blocks new grants until
	// usage drops; raising it may grant queued waiters); a semaphore
	// without holders keeps no total, and SUCCESS is answered at once.
	FlagSetPermits Flags = 1 << 3
	// FlagPrefix (Watch, Unwatch): the watch is a prefix watch on lock
	// group Group: Key is a key prefix ("" for every key of the
	// namespace), and the watch reports every change of a key of the
	// connection's namespace with that prefix whose group is Group. A
	// prefix watch is always continuous. See Watch.
	FlagPrefix Flags = 1 << 4
)

// Has reports whether every bit of x is set in f.
func (f Flags) Has(x Flags) bool { return f&x == x }

// Owner identifies who holds a lock. Client names a client instance: a
// random nonzero value chosen when the client starts, unique among the
// clients of a cluster with overwhelming probability, and repeated in its
// Hello after every reconnect. ID is the owner within that client; the
// client decides what an owner is (a lock handle, a goroutine's task, the
// whole process). Only the owner with a lock's current token may renew or
// release it.
type Owner struct {
	// Client is the client instance's id, the same as its Hello.ClientID.
	Client uint64
	// ID is the owner within the client.
	ID uint64
}

// IsZero reports whether o is the zero Owner, which names nobody.
func (o Owner) IsZero() bool { return o.Client == 0 && o.ID == 0 }

// String formats the owner as client/id in hex.
func (o Owner) String() string {
	return strconv.FormatUint(o.Client, 16) + "/" + strconv.FormatUint(o.ID, 16)
}
