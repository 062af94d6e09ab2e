package server

import (
	"sort"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// EnsureDefaults fills every unset field with its default: the lock
// service's from package group, the consensus's from package paxos.
func (c *Config) EnsureDefaults() {
	c.expandNodeID()
	if c.Groups <= 0 {
		c.Groups = wire.DefaultGroups
	}
	if c.ClusterName == "" {
		c.ClusterName = "paxlock"
	}
	if c.Workers <= 0 {
		c.Workers = group.DefaultWorkers
	}
	if c.Tick <= 0 {
		c.Tick = Duration(10 * time.Millisecond)
	}
	if c.Lease <= 0 {
		c.Lease = Duration(time.Second)
	}
	if c.Heartbeat <= 0 {
		// Four renewals per lease: enough margin for a lost heartbeat or
		// two, and an idle node wakes 4 times a second per peer rather
		// than 10 (see Heartbeat).
		c.Heartbeat = min(Duration(250*time.Millisecond), c.Lease/4)
	}
	if c.MaxDrift <= 0 {
		c.MaxDrift = paxos.DefaultMaxDrift
	}
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = Duration(group.DefaultTTL)
	}
	if c.MinTTL <= 0 {
		c.MinTTL = Duration(group.DefaultMinTTL)
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = Duration(group.DefaultMaxTTL)
	}
	if c.WeightAging <= 0 {
		c.WeightAging = Duration(group.DefaultWeightAging)
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = 1 << 20
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 10000
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 4096
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = 16 << 20
	}
	if c.MaxWaitsPerConn <= 0 {
		c.MaxWaitsPerConn = group.DefaultMaxConnWaits
	}
	if c.MaxWatchesPerConn <= 0 {
		c.MaxWatchesPerConn = group.DefaultMaxConnWatches
	}
	if c.MaxWaitsPerNamespace <= 0 {
		c.MaxWaitsPerNamespace = group.DefaultMaxNamespaceWaits
	}
	if c.MaxWatchesPerNamespace <= 0 {
		c.MaxWatchesPerNamespace = group.DefaultMaxNamespaceWatches
	}
	if c.MaxPrefixWatchesPerConn <= 0 {
		c.MaxPrefixWatchesPerConn = group.DefaultMaxConnPrefixWatches
	}
	if c.MaxPrefixWatchesPerNamespace <= 0 {
		c.MaxPrefixWatchesPerNamespace = group.DefaultMaxNamespacePrefixWatches
	}
	c.SessionLimits.ensureDefaults()
	c.RegistryLimits.ensureDefaults()
	if c.AuditKeep <= 0 {
		c.AuditKeep = group.DefaultAuditKeep
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = Duration(2 * time.Minute)
	}
	c.ConnLimits.setDefaults(c.MaxFrame, c.MaxOutput)
	if c.DrainTimeout == 0 {
		c.DrainTimeout = Duration(10 * time.Second)
	}
	if c.ForwardAfter == 0 {
		c.ForwardAfter = 2
	}
	if c.InstanceWindow <= 0 {
		c.InstanceWindow = paxos.DefaultMaxInflight
	}
	c.ConsensusLimits.ensureDefaults(c.InstanceWindow)
	if c.QuorumSync == nil {
		qs := paxos.DefaultQuorumSync
		c.QuorumSync = &qs
	}
	if c.ClientListener == "" {
		c.ClientListener = ListenerNetpoll
	}
	if c.GossipTiming == "" {
		c.GossipTiming = GossipLAN
	}
	sort.Slice(c.Nodes, func(i, j int) bool { return c.Nodes[i].ID < c.Nodes[j].ID })
}
