package server

import (
	"fmt"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/host"
)

// ConsensusLimits bound what each group's consensus core takes from a
// peer, whoever holds a node certificate (paxos.Config; Config embeds
// them, their JSON keys sit with the others). What lies beyond them no
// honest node sends: the core drops it unread and counts it in
// paxlock_peer_messages_refused_total.
type ConsensusLimits struct {
	// MaxRoundJump bounds how far above the highest ballot round a
	// replica has seen a peer's ballot may lie (default
	// paxos.DefaultMaxRoundJump, 2^32; paxos.Config.MaxRoundJump). An
	// honest node's round grows by one per campaign.
	MaxRoundJump uint64 `json:"max_round_jump"`
	// MaxInstanceAhead bounds how far above its committed instance a
	// replica stores and votes for an entry a peer's Accept carries (a
	// candidate refuses a promise reporting one beyond twice it): default
	// the larger of paxos.DefaultMaxInstanceAhead (16,384), four
	// checkpoint intervals and instance_window; at least instance_window
	// and two checkpoint intervals (paxos.Config.MaxInstanceAhead).
	MaxInstanceAhead uint64 `json:"max_instance_ahead"`
}

// minInstanceAhead is the least MaxInstanceAhead a node's groups run
// with: a master's window (instanceWindow) and what a restarted replica
// may hold above the committed instance it reloads (a checkpoint
// interval, doubled for room; see host.ReplicaConfig.CheckpointEvery).
func minInstanceAhead(instanceWindow int) uint64 {
	return max(uint64(max(instanceWindow, 0)), 2*host.DefaultCheckpointEvery)
}

// ensureDefaults fills the unset limits.
func (l *ConsensusLimits) ensureDefaults(instanceWindow int) {
	if l.MaxRoundJump == 0 {
		l.MaxRoundJump = paxos.DefaultMaxRoundJump
	}
	if l.MaxInstanceAhead == 0 {
		l.MaxInstanceAhead = max(paxos.DefaultMaxInstanceAhead, 4*host.DefaultCheckpointEvery, uint64(max(instanceWindow, 0)))
	}
}

// validate reports limits the groups could not run with (unset ones are
// their defaults, which can).
func (l *ConsensusLimits) validate(instanceWindow int) []error {
	if least := minInstanceAhead(instanceWindow); l.MaxInstanceAhead != 0 && l.MaxInstanceAhead < least {
		return []error{fmt.Errorf("max_instance_ahead: %d is below %d (instance_window %d, and twice the checkpoint interval %d): followers would refuse an honest master's entries", l.MaxInstanceAhead, least, instanceWindow, host.DefaultCheckpointEvery)}
	}
	return nil
}

// apply sets the limits on a group's core configuration.
func (l *ConsensusLimits) apply(pc *paxos.Config) {
	pc.MaxRoundJump = l.MaxRoundJump
	pc.MaxInstanceAhead = l.MaxInstanceAhead
}
