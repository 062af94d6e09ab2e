package group

import (
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// ID names a lock group: one of the Config.Groups (default 15) groups,
// numbered from 0, that the key hash divides the keys among
// (wire.GroupOf). Each lock group is replicated by one replica group (a
// Paxos group, paxos.GroupID), and ReplicaGroup is the one place that maps
// the first onto the second. Metrics and the admin API write an ID as its
// number, as they did a plain int.
type ID int

// ReplicaGroup is the Paxos group that replicates lock group g. Lock
// groups count from 0 (NamespaceGroup is 0); Paxos group ids count from 1,
// because 0 is no group on the peer wire.
func (g ID) ReplicaGroup() paxos.GroupID { return paxos.GroupID(g + 1) }

// Of is the lock group of key hash h among groups lock groups.
func Of(h uint64, groups int) ID { return ID(wire.GroupOf(h, groups)) }
