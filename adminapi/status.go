package adminapi

import (
	"time"

	"github.com/paxlock/paxlock/internal/buildinfo"
)

// BuildInfo is the build a node runs: its module version, VCS revision
// and time, and Go version (Status.Build).
type BuildInfo = buildinfo.Info

// NodeAddr is one member of the cluster: its addresses, as a node's
// configuration lists them and Status reports them.
type NodeAddr struct {
	ID uint32 `json:"id"`
	// Peer is the address Paxos traffic uses; Client the binary protocol's.
	Peer   string `json:"peer"`
	Client string `json:"client"`
	// ClientTLS is the node's TLS client listener (optional; needs the
	// tls section, whose certificate it serves). Clients that set
	// client.Config.TLS use it, and so do relays between nodes when
	// the peers use TLS.
	ClientTLS string `json:"client_tls_addr,omitempty"`
	// Gossip is the memberlist address (optional).
	Gossip string `json:"gossip,omitempty"`
	// Admin is the node's admin HTTP address (optional; lets other nodes
	// redirect namespace changes to the node that can make them).
	Admin string `json:"admin,omitempty"`
}

// GroupStatus is one group's state as the answering node sees it.
type GroupStatus struct {
	Group     int    `json:"group"`
	Master    uint32 `json:"master"`
	Epoch     uint64 `json:"epoch"`
	Serving   bool   `json:"serving"`
	Committed uint64 `json:"committed"`
	Applied   uint64 `json:"applied"`
	LogStart  uint64 `json:"log_start"`
	Locks     int64  `json:"locks"`
	Version   uint64 `json:"group_version"`
	// Members are the group's acceptors as this node sees them;
	// MemberChange the change in progress on this node as its master
	// ("+4", "-1"), "" if none.
	Members      []uint32 `json:"members,omitempty"`
	MemberChange string   `json:"member_change,omitempty"`
}

// Status is a node's report for operators: what GET /status answers
// (paxlockctl status).
type Status struct {
	Node        uint32 `json:"node"`
	Client      string `json:"client"`
	ViewVersion uint64 `json:"view_version"`
	Conns       int64  `json:"conns"`
	// StorageFailed says a write or fsync of the node's store failed:
	// the node stopped all its groups (fail-stop) and serves none until it
	// is restarted on a working disk. StorageError is that failure.
	StorageFailed bool          `json:"storage_failed"`
	StorageError  string        `json:"storage_error,omitempty"`
	Groups        []GroupStatus `json:"groups"`
	Nodes         []NodeAddr    `json:"nodes"`
	// Ready and ReadyReason are what /readyz answers (see server.Server.Ready).
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"ready_reason"`
	// Build is the build the node runs; Version its one-line form
	// (version, revision, time, Go), "" when the binary carries none.
	Build   BuildInfo `json:"build"`
	Version string    `json:"version"`
	// Started is when the node's process started serving; UptimeMs how
	// long ago that was when the status was made.
	Started  time.Time `json:"started"`
	UptimeMs int64     `json:"uptime_ms"`
	// HotKeys and MasterChanges are filled by /status?detail=1 only (see
	// server.Server.StatusDetail): the keys with the most waiters on the groups this
	// node serves, and the last master changes it saw, newest first.
	HotKeys       []HotKey       `json:"hot_keys,omitempty"`
	MasterChanges []MasterChange `json:"master_changes,omitempty"`
	// Quotas, filled by /status?detail=1 only, are the namespace quotas
	// the node enforces and its use of them.
	Quotas []QuotaStatus `json:"quotas,omitempty"`
	// Namespaces, filled by /status?detail=1 only, is every namespace
	// of the table with this node's counts of it.
	Namespaces []NamespaceUse `json:"namespaces,omitempty"`
	// Clients, filled by /status?detail=1 only, are the node's
	// authenticated client sessions, longest connected first, at most
	// MaxConsoleClients (ClientsMore: there are more).
	Clients     []ClientSession `json:"clients,omitempty"`
	ClientsMore bool            `json:"clients_more,omitempty"`
}

// MaxConsoleClients bounds the client sessions a Status lists.
const MaxConsoleClients = 200

// ClientSession is one authenticated client connection to a node.
type ClientSession struct {
	// Client is the client's id in hex, as lock owners name it
	// (client/owner).
	Client    string `json:"client"`
	Namespace string `json:"namespace"`
	Remote    string `json:"remote"`
	// Relay is the node that relays the session for its client (0: the
	// client connected here itself).
	Relay     uint32    `json:"relay,omitempty"`
	Connected time.Time `json:"connected"`
	// Node is the node that serves the session (GET /clients; in a
	// Status, the node reporting).
	Node uint32 `json:"node,omitempty"`
	// TLS: the session came in on the node's TLS client listener.
	TLS bool `json:"tls,omitempty"`
	// InFlight counts its requests the node has not answered yet; Waits,
	// Watches and PrefixWatches its blocked acquires and watches kept by
	// the groups this node masters (those at other masters are counted
	// there, under the relaying node's session).
	InFlight      int64 `json:"in_flight,omitempty"`
	Waits         int   `json:"waits,omitempty"`
	Watches       int   `json:"watches,omitempty"`
	PrefixWatches int   `json:"prefix_watches,omitempty"`
}

// NamespaceUse is a namespace's locks: its held keys and their holders
// (a writer, each reader, each semaphore holder) as a node's replicas
// have applied them, and the blocked acquires queued for its keys on the
// masters counted (one node's in a Status, the cluster's in a
// ClusterStatus).
type NamespaceUse struct {
	Namespace string `json:"namespace"`
	Held      int64  `json:"held"`
	Holders   int64  `json:"holders"`
	Waiters   int64  `json:"waiters"`
}

// HotKey is a key with waiters on a group the answering node serves, for the
// operators' console: who holds it and how many wait for it.
type HotKey struct {
	Group     int          `json:"group"`
	Namespace string       `json:"namespace"`
	Key       string       `json:"key"`
	Waiters   int          `json:"waiters"`
	Watchers  int          `json:"watchers"`
	Holders   []HolderInfo `json:"holders"`
}

// HolderInfo is one hold of a HotKey.
type HolderInfo struct {
	// Owner is the holder as client/owner in hex (wire.Owner.String).
	Owner string `json:"owner"`
	Kind  string `json:"kind"`
	Token uint64 `json:"token"`
	// TTLLeftMs is the time left until the hold expires unless renewed,
	// as the master measures it (its TTL when unknown).
	TTLLeftMs int64 `json:"ttl_left_ms"`
}

// MasterChange is a group getting a new master, as one node saw it.
type MasterChange struct {
	Time  time.Time `json:"time"`
	Group int       `json:"group"`
	// From is the previous master this node knew (0: none since it
	// started), To the new one.
	From  uint32 `json:"from"`
	To    uint32 `json:"to"`
	Epoch uint64 `json:"epoch"`
}
