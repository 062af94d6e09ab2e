package adminapi

import "time"

// ClusterStatus is the whole cluster as one node gathers it for the
// console (GET /cluster, and each message of GET /events).
type ClusterStatus struct {
	// Node is the node that gathered it; Time when.
	Node        uint32    `json:"node"`
	Time        time.Time `json:"time"`
	ViewVersion uint64    `json:"view_version"`
	// Version is the gathering node's build (Status.Version).
	Version string         `json:"version"`
	Nodes   []ConsoleNode  `json:"nodes"`
	Groups  []ConsoleGroup `json:"groups"`
	// HotKeys are the keys with the most waiters over the cluster, most
	// first; MasterChanges the last changes of master, newest first.
	HotKeys       []HotKey       `json:"hot_keys"`
	MasterChanges []MasterChange `json:"master_changes"`
	// Quotas are the namespaces with a quota, sorted by name, with their
	// use over the reachable nodes: Held as the most up to date node has
	// it, Waiters and Refused summed over the nodes (the node shares are
	// left out).
	Quotas []QuotaStatus `json:"quotas"`
	// Namespaces is every namespace, sorted by name, with its held keys
	// and holders as the most up to date reachable node has them and its
	// waiters summed over the reachable nodes (each counts its masters').
	Namespaces []NamespaceUse `json:"namespaces"`
}

// ConsoleNode is one member in a ClusterStatus.
type ConsoleNode struct {
	ID     uint32 `json:"id"`
	Client string `json:"client"`
	Admin  string `json:"admin"`
	// Alive is the gathering node's membership view of it.
	Alive bool `json:"alive"`
	// Reachable says its status was read; Error why not.
	Reachable     bool   `json:"reachable"`
	Error         string `json:"error,omitempty"`
	Ready         bool   `json:"ready"`
	ReadyReason   string `json:"ready_reason,omitempty"`
	StorageFailed bool   `json:"storage_failed"`
	Conns         int64  `json:"conns"`
	// Version is the node's build, from its status (Status.Version).
	Version string `json:"version,omitempty"`
	// UptimeMs is how long the node has run, from its status.
	UptimeMs int64 `json:"uptime_ms,omitempty"`
	// Clients are its client sessions (Status.Clients, ClientsMore).
	Clients     []ClientSession `json:"clients,omitempty"`
	ClientsMore bool            `json:"clients_more,omitempty"`
	// Mastered counts the groups the gathering node's view says it
	// masters.
	Mastered int `json:"mastered"`
}

// ConsoleGroup is one group in a ClusterStatus.
type ConsoleGroup struct {
	Group  int    `json:"group"`
	Master uint32 `json:"master"`
	Epoch  uint64 `json:"epoch"`
	// Serving, Committed, Applied and Locks are the master's (the
	// gathering node's own when the master's status is not known).
	Serving   bool   `json:"serving"`
	Committed uint64 `json:"committed"`
	Applied   uint64 `json:"applied"`
	Locks     int64  `json:"locks"`
	// Replicas is each reachable node's applied instance and its lag
	// behind the highest committed instance any node reported.
	Replicas []ReplicaLag `json:"replicas"`
	// Members are the group's acceptors, MemberChange a change in
	// progress ("+4", "-1"), as the master reports them.
	Members      []uint32 `json:"members,omitempty"`
	MemberChange string   `json:"member_change,omitempty"`
}

// ReplicaLag is one replica's progress on a group.
type ReplicaLag struct {
	Node    uint32 `json:"node"`
	Applied uint64 `json:"applied"`
	Lag     uint64 `json:"lag"`
}
