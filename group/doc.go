// Package group is the lock service on top of paxos: it routes a key to
// its lock group (ID) and worker, decides on the master what can succeed, proposes
// it, applies acquire, renew, release and expire in a deterministic state
// machine, expires locks on the master's monotonic clock and grants freed
// locks to the waiter first in line: earliest arrival minus weight ×
// Config.WeightAging, so weights order the queue without starving anyone.
//
// # State machine
//
// Every replica keeps, per key, the holders of the lock (one writer, or
// readers) with each holder's owner, fencing token and TTL, in memory and
// in its replica group's Pebble keyspace. It stores TTLs, never deadlines: time
// enters the log only as an Expire the master decided (invariant I6; the
// invariants I1–I9 are in docs/design.md).
// A grant's token is groupVersion<<48 | instanceID; the master puts at most
// one owner-changing command per key into one instance (it serialises a
// key's changes), so a key's tokens strictly increase (I2), and a reader
// granted together with others in one command shares their token.
// A reacquire by the current owner keeps its token and refreshes its TTL,
// which also makes a retried acquire harmless.
//
// Lock group 0 also holds the cluster's system tables: namespaces and
// their verifiers, quotas, the member list and the registry's tables;
// every lock group holds its namespace-move records. All of them are
// tables of package systable, and the state machine multiplexes over them
// and its lock table (tables.go).
//
// # Files by job
//
//   - The service and its groups: lockgroup.go (ID, a lock group, and
//     the replica group that replicates it), service.go (Service, Group,
//     Config, Request, Sink, Observer; Submit and the routing of a key to
//     its worker), consensus.go (Consensus, what a group needs from its
//     replication), clock.go (Clock, the master's monotonic clock),
//     limits.go (Config's per-connection and per-namespace bounds and
//     their accounting), connections.go (the connections holds and
//     waits belong to: forgetting or revoking one), version.go (RaiseVersion, the group
//     version in every token).
//   - The replicated lock table: state.go (StateMachine: its shards, Apply
//     and the lock table's commands), tables.go (the multiplexer over
//     the tables: sending a command, or a loaded pair, to the table it
//     belongs to; proposing a change to a system table and waiting for
//     its outcome),
//     commands.go (the replicated commands and their encoding), record.go (a key's lock record and its holds),
//     checkpoint.go (Checkpoint; Load, each table loading its own records), semaphore.go
//     (counting semaphores), revoke_state.go (a force-unlock's replicated
//     mark), nslocks.go (holders per namespace, for quotas), nsindex.go
//     (each shard's keys by namespace, in order, for List).
//   - The master's workers: worker.go (a worker's event loop, per-key state
//     and what its service hands it: workerEnv), requests.go (deciding a request before proposing it),
//     acquire.go (acquires and the wait queue), results.go (a proposal's
//     outcome back to its requests and waiters), timers.go (holds' deadlines
//     and waits' timeouts on the worker's clock), heaps.go (the expiry
//     entries and the timer heap), holdtimes.go (the deadline slots and
//     the expiry heap, pointer-free), deadlines.go (each hold's master
//     deadline and start, the worker's own, never in a replicated record), mastership.go (becoming
//     and leaving master; requests held while master-elect), watch.go
//     (watches), revocation.go (force-unlock: revoke, then free when the
//     holder acknowledges; reaching a client after a master change), lockdelay.go (lock-delay), multi.go
//     (multi-lock: reservations and one command per group).
//   - Reading the table: state.go's view (a record read in place under
//     its shard's lock), list.go (List), inspect.go (HotKeys for the
//     console), inspect_key.go (InspectKey: one key's holders and queue,
//     for the admin API).
//   - Lock group 0's system tables, each with an outcome type of its own
//     (never a lock status): namespace.go (applying a namespace change,
//     with its quota; the Service's side of package systable's
//     Namespaces), quota.go (applying a quota change next to
//     the namespace table, the Service's side of package systable's
//     Quotas), quotacheck.go (enforcing quotas on the request
//     path), members.go (the Service's side of the cluster's member
//     list, package systable's Members), audit.go (opAudit, the
//     Service's side of package systable's Audit log),
//     registry.go (applying a registry change to package systable's
//     Registry; the registry's types by their group names),
//     registry_service.go (the Service's registry operations and the
//     tables' bounds on the proposer).
//   - Moving a namespace: move.go (the move commands and errors; a gated
//     namespace's answers; MoveInfo), move_apply.go (applying a move step
//     to package systable's Moves and, through it, to the lock table:
//     imports, drops), move_steps.go (proposing a step; export and import
//     of a namespace's records), move_worker.go (the workers' side of a
//     frozen or moved namespace).
//   - Backups: backup.go (a group's image into a backup file, every
//     record checked while reading one, restoring one; the file format is
//     package backup's).
package group
