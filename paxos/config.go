package paxos

import (
	"fmt"
	"slices"
)

// Config configures one group's Core.
type Config struct {
	// ID is this replica; Peers lists every replica of the group, ID
	// included: the member set a group starts with. Once the group's log
	// or a snapshot records a set (InitState.Membership), that set is in
	// force instead and Peers is not consulted.
	ID    NodeID
	Group GroupID
	Peers []NodeID

	// HeartbeatTicks is how often a master renews its lease and announces
	// the committed instance.
	HeartbeatTicks int
	// TickPhase is how many ticks of the driver's common clock had passed
	// when this core's tick 0 happened. A master heartbeats at the ticks
	// where its tick plus TickPhase is a multiple of HeartbeatTicks, so
	// the groups of one node, ticked together, heartbeat together and
	// their followers acknowledge together: one burst of messages per peer
	// instead of one per group.
	TickPhase uint64
	// LeaseTicks is how long an acceptor, after promising or renewing a
	// ballot, refuses to promise any other ballot. The master's own lease is
	// shorter (see MaxDrift), and followers campaign only after they heard
	// nothing for longer than this.
	LeaseTicks int
	// MaxDrift bounds how far any node's tick rate may differ from real
	// time, as a fraction (0.01 = 1%). Leases are shortened by it.
	MaxDrift float64
	// RetransmitTicks is how long a master waits for an Accepted before it
	// sends the Accept again, and a follower before it repeats a Learn
	// (default HeartbeatTicks).
	RetransmitTicks int
	// CampaignSlackTicks is how much longer than LeaseTicks a follower that
	// heard nothing waits before it campaigns, before the jitter (default
	// 2×HeartbeatTicks). It sets the failover time with the lease, so a
	// driver that lengthens the heartbeat to save idle wake-ups can keep
	// it.
	CampaignSlackTicks int

	// MaxInflight bounds the instances a master has in phase 2 at once
	// (default DefaultMaxInflight). With 1, everything proposed while one
	// instance is in flight rides in the next one: fewer, larger
	// instances, for a runtime where the cost per instance, not the wait,
	// is what limits.
	MaxInflight int
	// MaxBatchCmds and MaxBatchBytes bound one instance's batch.
	MaxBatchCmds  int
	MaxBatchBytes int
	// MaxQueue bounds the commands waiting for a batch; Propose answers
	// ErrOverloaded beyond it.
	MaxQueue int
	// MaxMsgBytes bounds the entries carried by one Promise or LearnReply.
	MaxMsgBytes int

	// MaxRoundJump bounds how far above the highest round this replica
	// has seen a ballot in a peer's message may lie (default
	// DefaultMaxRoundJump); a message beyond it is refused unread. An
	// honest node's round grows by one per campaign, so no honest gap
	// comes near the default, while a ballot of round MaxUint64 would
	// leave no higher ballot for any replica to campaign with.
	MaxRoundJump uint64
	// MaxInstanceAhead bounds how far above its committed instance a
	// replica stores (and votes for) an entry a peer's Accept carries
	// (default DefaultMaxInstanceAhead, and at least MaxInflight); a
	// candidate refuses a promise that reports an entry, or a last
	// instance, more than twice as far above its own committed instance.
	// An honest master proposes at most MaxInflight instances above its
	// committed one; a replica that lags learns first and votes later.
	// The doubled bound on recovery covers what a restarted acceptor
	// holds above the committed instance it reloads (at most the
	// instances applied since its last checkpoint, see
	// host.ReplicaConfig.CheckpointEvery).
	MaxInstanceAhead uint64

	// QuorumSync makes a master ask only as many followers as a quorum
	// needs (the voters) to sync and vote on each new instance; the other
	// followers get it write-only (Message.WriteOnly), and are asked to
	// vote only when a voter's vote has not come within RetransmitTicks.
	// It needs every replica to decode WriteOnly (docs/design.md,
	// "Rounds synced by exactly a quorum"). A driver that reads the
	// default uses DefaultQuorumSync.
	QuorumSync bool

	// Seed seeds the election-timeout jitter, so that a simulation replays.
	Seed uint64
}

// Defaults of Config's fields that a node's configuration also states.
const (
	// DefaultMaxDrift is the bound on clock-rate differences between
	// nodes.
	DefaultMaxDrift = 0.01
	// DefaultMaxInflight is how many instances a master keeps in flight
	// at once: enough to overlap one round's fsync with the next round's
	// messages.
	DefaultMaxInflight = 4
	// DefaultMaxRoundJump is Config.MaxRoundJump's default: 2^32 rounds,
	// more campaigns than a node cut off for a century makes, while a
	// peer must make 2^32 jumps, each promised, to exhaust the rounds.
	DefaultMaxRoundJump = 1 << 32
	// DefaultMaxInstanceAhead is Config.MaxInstanceAhead's default.
	DefaultMaxInstanceAhead = 1 << 14
	// DefaultQuorumSync is whether a node's groups sync each instance on
	// exactly a quorum (Config.QuorumSync) when its configuration does not
	// say (the node's quorum_sync setting).
	DefaultQuorumSync = false
)

// EnsureDefaults fills in every unset tuning field with its default.
// NewCore calls it; a runtime that reads the defaults calls it first.
func (c *Config) EnsureDefaults() {
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 10
	}
	if c.LeaseTicks <= 0 {
		c.LeaseTicks = 10 * c.HeartbeatTicks
	}
	if c.MaxDrift <= 0 {
		c.MaxDrift = DefaultMaxDrift
	}
	if c.RetransmitTicks <= 0 {
		c.RetransmitTicks = c.HeartbeatTicks
	}
	if c.CampaignSlackTicks <= 0 {
		c.CampaignSlackTicks = 2 * c.HeartbeatTicks
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxBatchCmds <= 0 {
		c.MaxBatchCmds = 2048
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 1 << 20
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 1 << 16
	}
	if c.MaxMsgBytes <= 0 {
		c.MaxMsgBytes = 4 << 20
	}
	if c.MaxRoundJump == 0 {
		c.MaxRoundJump = DefaultMaxRoundJump
	}
	if c.MaxInstanceAhead == 0 {
		c.MaxInstanceAhead = max(DefaultMaxInstanceAhead, uint64(c.MaxInflight))
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error { return c.validate(true) }

// validate is Validate; a Core that resumes from a recorded member set
// (InitState.Membership) does not need itself in Peers: it may be a node
// that joins, or one that was removed.
func (c *Config) validate(peersInForce bool) error {
	if c.ID == 0 {
		return fmt.Errorf("paxos: config: node id 0 is reserved")
	}
	if peersInForce && !slices.Contains(c.Peers, c.ID) {
		return fmt.Errorf("paxos: config: peers %v do not include self %d", c.Peers, c.ID)
	}
	if c.MaxInstanceAhead < uint64(c.MaxInflight) {
		return fmt.Errorf("paxos: config: max instance ahead %d below max inflight %d: followers would refuse the master's window", c.MaxInstanceAhead, c.MaxInflight)
	}
	if c.MaxDrift >= 0.5 {
		return fmt.Errorf("paxos: config: max drift %.2f too large", c.MaxDrift)
	}
	return nil
}

// InitState is what a Core starts from: the durable state of its replica.
type InitState struct {
	Hard     HardState
	LogStart uint64
	Applied  uint64
	// Entries holds every stored entry above Applied, in instance order.
	Entries []Entry
	// NeedSnapshot says the state machine is incomplete (an install was
	// cut short): nothing is applied until a snapshot is installed.
	NeedSnapshot bool
	// Membership is the member set in force after instance Applied (the
	// one the state machine's keyspace or snapshot recorded with it); the
	// zero value means none was recorded and Config.Peers is in force.
	// Changes chosen above Applied are folded in from Entries.
	Membership Membership
}

// LogReader gives a Core read access to stored entries at or below its
// applied instance, which it no longer keeps in memory.
type LogReader interface {
	Entries(from, to uint64, maxBytes int) ([]Entry, error)
}
