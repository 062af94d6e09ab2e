package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/pki"
)

// Validate reports a configuration that cannot start.
func (c *Config) Validate() error {
	var errs []error
	if err := c.validateBindHost(); err != nil {
		errs = append(errs, err)
	}
	if c.RegistryNamespace != "" {
		if err := wire.ValidateNamespace(c.RegistryNamespace); err != nil {
			errs = append(errs, fmt.Errorf("registry_namespace: %w", err))
		}
	}
	switch c.ClientListener {
	case "", ListenerGnet, ListenerNetpoll:
	default:
		errs = append(errs, fmt.Errorf("client_listener: %q is neither %q nor %q", c.ClientListener, ListenerGnet, ListenerNetpoll))
	}
	switch c.GossipTiming {
	case "", GossipLAN, GossipLocal:
	default:
		errs = append(errs, fmt.Errorf("gossip_timing: %q is neither %q nor %q", c.GossipTiming, GossipLAN, GossipLocal))
	}
	if c.AuditKeep > group.MaxAuditKeep {
		errs = append(errs, fmt.Errorf("audit_keep: %d, at most %d", c.AuditKeep, group.MaxAuditKeep))
	}
	if err := c.Tracing.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.NodeID == 0 {
		errs = append(errs, errors.New("node_id must be set and nonzero"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir must be set"))
	}
	seen := map[uint32]bool{}
	self := false
	for _, n := range c.Nodes {
		if n.ID == 0 || seen[n.ID] {
			errs = append(errs, fmt.Errorf("nodes: id %d is zero or repeated", n.ID))
		}
		seen[n.ID] = true
		if n.Peer == "" || n.Client == "" {
			errs = append(errs, fmt.Errorf("nodes: node %d needs peer and client addresses", n.ID))
		}
		if n.ID == c.NodeID {
			self = true
		}
	}
	if !self {
		errs = append(errs, fmt.Errorf("nodes: this node (%d) is not listed", c.NodeID))
	}
	if c.Lease < 5*c.Tick || c.Heartbeat < c.Tick || c.Heartbeat*3 > c.Lease {
		errs = append(errs, errors.New("timing: need lease >= 5 ticks, heartbeat >= 1 tick and heartbeat <= lease/3"))
	}
	if c.MinTTL > c.MaxTTL || c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		errs = append(errs, errors.New("ttl: need min_ttl <= default_ttl <= max_ttl"))
	}
	if c.WeightAging > Duration(time.Hour) {
		errs = append(errs, fmt.Errorf("weight_aging: %v is more than 1h", time.Duration(c.WeightAging)))
	}
	for _, n := range c.Namespaces {
		if err := wire.ValidateNamespace(n.Name); err != nil {
			errs = append(errs, fmt.Errorf("namespaces: %q: %w", n.Name, err))
		}
	}
	if c.TLS != nil {
		if c.TLS.CA == "" || c.TLS.Cert == "" || c.TLS.Key == "" {
			errs = append(errs, errors.New("tls: needs ca, cert and key"))
		}
		if err := pki.ValidCluster(c.ClusterName); err != nil {
			errs = append(errs, fmt.Errorf("tls: %w", err))
		}
	}
	if c.TLS == nil && c.self().ClientTLS != "" {
		errs = append(errs, errors.New("client_tls_addr: the TLS client listener serves the node's certificate from the tls section, which is not set"))
	}
	errs = append(errs, c.validateClientTLS()...)
	errs = append(errs, c.ConsensusLimits.validate(c.InstanceWindow)...)
	if a := c.AdminTLS; a != nil && (a.Cert == "") != (a.Key == "") {
		errs = append(errs, errors.New("admin_tls: set both cert and key, or neither (the node's tls cert and key)"))
	}
	if a := c.AdminTLS; a != nil && a.Cert == "" && c.TLS == nil {
		errs = append(errs, errors.New("admin_tls: without cert and key it uses the node's tls section, which is not set"))
	}
	if c.GossipKey != "" && c.GossipKeyFile != "" {
		errs = append(errs, errors.New("gossip_key and gossip_key_file: set one"))
	}
	if _, err := c.gossipKeys(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.adminToken(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.relaySecret(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
