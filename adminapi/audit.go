package adminapi

// AuditRecord is one record of the audit log (GET /audit): a change made
// through the admin API, as lock group 0 keeps it on every replica.
type AuditRecord struct {
	// Seq is the record's place in the log, the same on every node.
	Seq uint64 `json:"seq"`
	// Instance is the lock group 0 instance the record was chosen at.
	Instance uint64 `json:"instance"`
	// Time is the serving node's wall clock when it proposed the record
	// (RFC 3339, UTC): as right as that clock; Seq orders the records.
	Time string `json:"time"`
	// Node is the node that served the change.
	Node uint32 `json:"node"`
	// Actor is who asked: "admin token", "cert:" and a client
	// certificate's subject, "open endpoint" (no admin token set), or
	// "node N" for a node's own action.
	Actor string `json:"actor"`
	// Source is the request's remote address.
	Source string `json:"source"`
	// Action names the change (force_unlock, namespace_put, quota_set,
	// member_add, drain, ...).
	Action string `json:"action"`
	// Namespace and Target are what it changed (a namespace; a key, a
	// member id, a quota's limits...), either possibly empty.
	Namespace string `json:"namespace,omitempty"`
	Target    string `json:"target,omitempty"`
	// Outcome is "ok", "pending" (accepted, not finished), or the
	// refusal: its HTTP status and message.
	Outcome string `json:"outcome"`
}

// AuditLog is GET /audit's answer.
type AuditLog struct {
	// Node is the node whose replica answered. Last is the Seq of the
	// last record returned (the query's since when none): the next page
	// asks since=Last.
	Node    uint32        `json:"node"`
	Last    uint64        `json:"last"`
	Records []AuditRecord `json:"records"`
}
