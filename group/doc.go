// Package group is the lock service on top of paxos: it routes a key to
// its group and worker, decides on the master what can succeed, proposes
// it, applies acquire, renew, release and expire in a deterministic state
// machine, expires locks on the master's monotonic clock and grants freed
// locks to the waiter first in line: earliest arrival minus weight ×
// Config.WeightAging, so weights order the queue without starving anyone.
//
// # State machine
//
// Every replica keeps, per key, the holders of the lock (one writer, or
// readers) with each holder's owner, fencing token and TTL, in memory and
// in its Paxos group's Pebble keyspace. It stores TTLs, never deadlines: time
// enters the log only as an Expire the master decided (invariant I6; the
// invariants I1–I9 are in docs/design.md).
// A grant's token is groupVersion<<48 | instanceID; the master puts at most
// one owner-changing command per key into one instance (it serialises a
// key's changes), so a key's tokens strictly increase (I2), and a reader
// granted together with others in one command shares their token.
// A reacquire by the current owner keeps its token and refreshes its TTL,
// which also makes a retried acquire harmless.
package group
