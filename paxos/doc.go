// Package paxos implements Multi-Paxos for one replication group: a
// deterministic core (Core) that takes messages, ticks and proposals and
// returns messages to send, state to persist and decisions to apply, and the
// contracts of what drives it: the replicated StateMachine, Storage and
// Transport. Package host is the runtime that drives many cores with them.
//
// The core follows the shape of etcd-io/raft: no goroutines, sockets or clock
// reads inside, so that a simulator can drive it through any interleaving and
// check safety after every step. The package imports nothing but the
// standard library.
//
// # Files by job
//
//   - The core: core.go (Core: its state, ticks, steps and elections),
//     config.go (Config, InitState), ready.go (Ready, the driver's side of
//     the contract: HasReady, Ready, Advance), core_acceptor.go (Prepare,
//     Accept, Heartbeat, learning), core_master.go (campaign, proposing,
//     commit, heartbeats, hand-off), core_member.go (membership changes),
//     core_refuse.go (what it refuses from its peers), core_invariants.go
//     (C1–C17), membership.go (member sets and changes), types.go
//     (messages, ballots, entries).
//   - Encodings: codec.go (messages and log entries, the peer wire
//     format), codec_state.go (hard state, member set, snapshot chunks).
//   - The contracts of what drives a core: statemachine.go (StateMachine,
//     Result), storage.go (Storage and its batches and snapshots),
//     transport.go (Transport).
//
// The runtime is in subpackages: host (the loop that drives every group
// of a node, and its replicas), pebblestore (Storage on Pebble), tcpnet
// (Transport over TCP and TLS) and paxostest (an in-process network for
// tests).
//
// # Protocol
//
// A node becomes master of a group with phase 1 (Prepare/Promise) for every
// instance from its first unchosen one on, under a ballot ordered by
// (round, node). It then runs phase 2 (Accept/Accepted) per instance, with up
// to Config.MaxInflight instances in flight. Commands that arrive while the
// window is full queue and ride in the next instance together (adaptive
// batching without a fixed delay). The master tells followers which
// instances are chosen in every Accept and Heartbeat, so they learn without
// another round; a follower that misses instances asks for them (Learn), and
// one that fell behind the truncated log receives a snapshot.
//
// # Leases (invariant I5 in docs/design.md)
//
// Master leases are promise-based and use only local tick counts. An acceptor
// that promises or renews ballot b refuses every other ballot's Prepare for
// LeaseTicks of its own ticks; a master counts its lease from the tick at
// which it sent the Prepare or Heartbeat that a majority acknowledged, and
// shortens it by the configured clock-rate bound, so the lease always ends
// before any acceptor would promise a rival. An acceptor that restarts has
// forgotten its promises' timers, so it promises nobody for LeaseTicks after
// it starts. A master hands the group over explicitly by stepping down first
// and then telling the target it may campaign at once (TimeoutNow); acceptors
// release their lease for a Prepare that carries the released ballot.
//
// # Membership
//
// A group's member set changes through its own log: a value that carries
// a MemberChange (one node added or removed) is in force for every
// instance after the one that chose it. A master proposes nothing above
// an undecided change and, once it is chosen, runs phase 1 again under
// the new set (core_member.go; the argument is in docs/design.md,
// "Membership").
package paxos
