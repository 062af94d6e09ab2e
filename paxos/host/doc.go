// Package host is the runtime that drives the deterministic Multi-Paxos
// cores of package paxos: one Host per node runs every Paxos group the
// node replicates, with the storage and transport it is given, and a
// Replica is this node's replica of one group, applying chosen commands
// to the group's paxos.StateMachine. The Host takes its ticks, leases and
// timeouts from the clock it is given (Config.Clock; internal/clock), so
// that a test can run it on a fake one.
//
// # Files by job
//
//   - host.go: Host, the one loop per node that drains what arrived for
//     every group, hands the cores their ticks, carries out their Readys
//     in rounds (one storage batch and one transport call per round), and
//     the sync goroutine that sends each round's votes after its fsync.
//   - replica.go: Replica, its handle (Submit, Propose, Status, ...) and
//     its state-machine side (apply, checkpoint, answer).
//   - replica_member.go: recording the member set with the applied
//     instance, and ChangeMembership.
//   - snapshot.go: streaming snapshots to lagging replicas and installing
//     them.
//   - backup.go: OpenImage, a consistent image of a group for a backup.
//   - refusals.go: the core's and the host's refusals of peer messages,
//     counted by reason (Replica.Refusals).
package host
