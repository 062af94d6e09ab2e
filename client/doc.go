// Package client is paxlock's Go client: distributed locks with fencing
// tokens, served by a replicated paxlock cluster.
//
//	c, err := client.New(ctx, client.Config{
//		Registry:  []string{"10.0.0.1:7100", "10.0.0.2:7100"},
//		Namespace: "orders",
//		Secret:    secret,
//	})
//	...
//	m := c.Mutex("order:42", client.TTL(30*time.Second), client.AutoRenew())
//	if err := m.Lock(ctx); err != nil { ... } // waits on the server, woken by push
//	defer m.Unlock(ctx)
//	write(data, m.Token()) // the storage refuses tokens older than the newest it saw
//	select { case <-m.Lost(): ... }
//
// # Locks
//
// Client.Mutex returns a handle on an exclusive lock; Client.RWMutex a
// read-write lock (many readers or one writer, writers preferred). A handle
// is the lock's owner and is reentrant: Lock on a handle that holds counts,
// Unlock releases at zero. With the ProcessOwner option the owner is the
// whole Client instead, like WLock's process lock. Lock waits in the
// server's queue (ordered by arrival minus Weight × the server's
// weight_aging: weighted, without starvation) and is woken by the
// server's push; TryLock never waits and returns a *LockedError naming the
// holder. Every call that may wait takes a context.Context; a Lock whose
// context ends leaves the queue and gives back a grant that raced with it.
//
// # Validity, renewal and loss
//
// A lock is valid, on the client's monotonic clock, until the time its
// last acquire or renewal was sent plus its TTL minus a margin
// (Config.ClockDrift). The TTL is the one the server applied (it clamps
// the requested TTL to its min_ttl..max_ttl) when the answer says so,
// and never more than the one requested. With AutoRenew the client
// renews it every TTL/3.
//
// The client assumes no synchronized clocks, only that its clock and the
// master's run at about the same rate (the margin covers the difference).
// That is enough for a request the master answers: the master counts the
// TTL from a moment after it received the request, hence after the
// client sent it, so "send time plus TTL" on the client's clock ends no
// later than the master's deadline.
//
// # Validity after a queued grant
//
// A blocking Lock that queues is granted later by a push, and the master
// starts the TTL when it applies the grant, at a moment the client cannot
// see: the push may arrive late (a slow network, a relay, a paused
// process), so counting from its arrival could outlast the master's
// deadline. The push carries the TTL the master applied
// (wire.Granted.TTLMs), and the rule is:
//
//   - The grant counts from the send time of the wait's first Acquire.
//     The wait's id is new, so every Acquire that can have queued it was
//     sent at or after that time, and the master granted it later still:
//     "first send plus the applied TTL" ends no later than the master's
//     deadline, however late the push.
//   - If that leaves less than two thirds of the TTL (the wait took a
//     third of it or more, when an auto-renewed lock would already be
//     renewed), or the server did not say the TTL (an older server),
//     Lock first confirms the grant with a Renew, reports the lock held
//     only once that succeeds, and counts from the Renew's send time, by
//     the argument above. A grant that ended before the Renew reached the
//     master (LOCK_DELETED and the like) is not reported: Lock waits
//     again. If the Renew fails otherwise, Lock returns the error and
//     gives the lock back in the background.
//
// The first case is the common one under contention (a grant soon after)
// and costs nothing; an uncontended Lock is answered directly and never
// waits for a push, so it costs no extra round trip either. A direct
// answer counts from the Acquire's first send; if that was a third of the
// TTL ago or more (its attempts spanned a master change), Lock confirms
// it with a Renew too. A confirmation that itself took that long is made
// again, up to three Renews, so that Lock does not report a lock whose
// validity is nearly over.
// Lost is closed when the validity runs out without a successful renewal,
// when the server pushes Lost, or when a renewal is answered LOCK_DELETED,
// LOCK_CHANGED_OWNER, TOKEN_ERROR or REVOKED.
//
// # The holder's contract
//
// At any instant at which the client says a handle holds its lock —
// Held is true, ValidUntil is in the future, Lost is not closed, Context
// is not cancelled — no other owner is granted a conflicting hold on the
// key. This holds for every primitive (Mutex, both sides of RWMutex,
// Semaphore permits, MultiLock, Election leadership), under any message
// order, renewals with any TTL, master changes, node pauses, kills and
// partitions, and pauses of the client's own process. It rests on four
// rules (docs/design.md, invariant I9, has the argument):
//
//   - The validity never ends later than the master's deadline: it counts
//     from the send time of the last confirmed renewal, minus the drift
//     margin, and a new master restarts every deadline in full.
//   - A handle's renewals go one at a time. A renewal with a shorter TTL
//     shortens the validity the moment it is sent, before any answer: if
//     the answer is lost, the master may have applied it.
//   - A force-unlock revokes rather than frees: the holder is told
//     (Lost closes), its renewals are refused, and the master hands the key
//     on only once this client acknowledged — it does so by itself — or
//     the hold's deadline, which this client reaches first, passed.
//   - Held, ValidUntil, Lost and Context().Err() read the monotonic clock
//     when called, so a process that was paused past the validity sees the
//     loss at its first check after it wakes, even before the expiry timer
//     has run.
//
// The rule for the caller: check Held (or Context().Err()) right before
// each action on the protected resource, and pass ValidUntil or Context
// into the work so that it stops when the lock does. Between the check and
// the action a process can still pause, which no client can see: where the
// resource can check it, pass the fencing token (Mutex.Token, strictly
// increasing per key), or ask Client.CheckToken where it cannot keep the
// highest token itself.
//
// OnRenewTrouble reports an automatic renewal that failed while the lock
// is still valid, the early warning before Lost; such failures are also
// logged at Warn.
//
// # Token checks and lock-delay
//
// A resource that remembers the highest token it saw refuses older ones by
// itself. A service in front of one that cannot may ask the cluster:
// Client.CheckToken reports whether a token is still a current hold's
// (Chubby's CheckSequencer), answered by the master of the key's group
// without a Paxos round. For a resource that cannot see tokens at all, the
// LockDelay option keeps a lock freed involuntarily (its TTL ran out, or
// an operator force-unlocked it) from being granted to anyone else for a
// while, at most MaxLockDelay; Unlock frees the key at once. During the
// delay TryLock's *LockedError has no holder and says what is left
// (RetryAfter), and Lock waits to be granted when it ends.
//
// The MaxHold option bounds how long a lock is held, renewed or not: the
// client stops renewing and reports the lock lost (ErrHoldLimit) at the
// acquire's send time plus the bound, and the master ends the hold the
// bound after its grant, granting its waiters as it does for an expiry.
//
// # Connections and retries
//
// The client fetches the cluster view (which node masters each of the
// groups a key may hash to) from any registry address, subscribes to its
// changes and learns every node's address from it. It keeps one connection
// per node, multiplexed and pipelined by request id: callers queue frames
// and a writer goroutine sends all queued frames in one write; a reader
// goroutine hands replies to their callers and dispatches pushes. Idle
// connections carry heartbeats; a dead one is closed and its requests fail
// over. A request for a master the client cannot connect to goes through
// another node, which forwards it and relays the reply and pushes back
// (wire.Routed). Requests follow MASTER_REDIRECT and are re-sent, with
// backoff and within the caller's context, after TIMEOUT, OVERLOADED, NO_MASTER or a
// broken connection, at most Config.MaxRetries times. Re-sending is safe:
// a re-sent acquire by the lock's holder keeps its token. Blocked acquires
// and watches, which the master keeps in memory only, are sent again after
// a reconnect or a master change.
//
// # Errors
//
// Errors wrap the package's sentinels (ErrLocked, ErrNotHeld, ErrLockLost,
// ErrAuth, ErrClosed, ErrTimeout, ErrNoMaster, ErrOverloaded,
// ErrUnavailable, ErrInvalid, ErrBadRequest, ErrServer) and, when a context
// ended, the context's error; test them with errors.Is. *LockedError and
// *StatusError carry the server's details for errors.As.
//
// # Files by job
//
//   - The client and its connections: client.go (Config, Client, New,
//     Close), connect.go (dialing a node, the handshake, a lost
//     connection), conn.go (one multiplexed connection: calls and their
//     replies), push.go (Granted and Lost pushes to their handles),
//     view.go (the cluster view: refreshing it, routing a key to its
//     master), move.go (following a namespace that moved to another
//     cluster).
//   - Requests: request.go (sending a request: its attempts, redirects,
//     relays and backoff; a blocking acquire bound to the node that
//     queued it; the millisecond fields of the messages), retry.go (the
//     retry policy: what each answer's status or attempt's error leads
//     to, as a table).
//   - Locks: handle.go (Handle, the contract every handle shares, and its
//     one implementation for the handles built on a Mutex), mutex.go
//     (Mutex, the handle), ownerlock.go (one owner's lock on one key, in
//     one piece: its slot, count and hold, Lock and TryLock with the
//     waiter of a blocking acquire and the confirmation of a late grant,
//     and the clean-ups when an acquire gave up), hold.go (a held lock:
//     validity, renewal, loss), localq.go (local queueing,
//     Config.LocalQueue), locker.go (Mutex as a sync.Locker), rwmutex.go
//     (RWMutex), semaphore.go (Semaphore), multilock.go (MultiLock),
//     election.go (Election and Leader).
//   - Reading and checking: watch.go (State, Watch and its events),
//     check.go (CheckToken), list.go (List).
//   - Options and errors: options.go (Option and its functions, LockDelay
//     among them), errors.go (the sentinels, LockedError, StatusError, and
//     the errors of an acquire that found the key held or waited too
//     long).
//
// Mutex.Lock runs through mutex.go (the handle: its checks and its
// owner's slot), ownerlock.go (the acquire), hold.go (the hold it
// grants), localq.go (with Config.LocalQueue), request.go (the requests),
// and the client's lifecycle (client.go) and errors (errors.go).
package client
