// Package gossip is a paxlock node's membership over hashicorp/memberlist:
// the member list and its events, the compact node metadata it gossips,
// and the rule that places group masters on nodes.
//
// # Membership is a hint
//
// Membership wraps hashicorp/memberlist (SWIM with Lifeguard). Its failure
// detector is probabilistic: a node paused by GC or starved of CPU is
// suspected and declared dead while it is still running, and a node behind
// an asymmetric partition may look alive. Nothing in this package is a
// safety signal. It never decides that a lease ran out, that a master is
// gone, or that a lock may be granted; ballots, quorums and leases in
// package paxos do that. Membership tells clients where nodes listen, lets
// a node guess which groups it should master (PreferredMaster), and may
// prompt a node to start an election that Paxos then decides. It never
// carries Paxos traffic.
//
// # Metadata
//
// Every member gossips a small binary record (NodeMeta: node id, client and
// peer addresses, the groups it masters with their epochs) that must fit
// memberlist's 512-byte limit. EncodeMeta drops the group list and sets
// GroupsTruncated when it would not fit; the authoritative group→master map
// is the cluster view the nodes build from Paxos, not the gossip.
//
// # Placement
//
// Lock group g prefers live node g mod N among the live nodes sorted by id
// (PreferredMaster); StickyPreferredMaster keeps a group on its preferred
// node among all configured nodes while that node is live, and spreads
// only the groups of absent nodes. CheckBalanced and Misplaced judge a
// cluster view against that rule.
//
// # Files by job
//
//   - membership.go: Membership, one node's view of the members, over
//     memberlist.
//   - config.go: MembershipConfig and Timing.
//   - delegates.go: memberlist's delegates (metadata, leaving notices).
//   - events.go: Subscribe and the notification of changes.
//   - member.go: Member, its State and Event.
//   - meta.go: NodeMeta and its binary encoding.
//   - leave.go: Leave and MarkLeaving, a planned departure.
//   - seeds.go: rejoining the configured seeds that are missing.
//   - placement.go: PreferredMaster, StickyPreferredMaster and the checks
//     of a view against them.
//   - logging.go: memberlist's log into slog.
package gossip
