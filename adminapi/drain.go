package adminapi

// Drained is the answer of POST /drain (paxlockctl drain): the groups the
// node mastered when asked, and whether a peer masters each of them now.
// A drained node keeps answering clients (with redirects) and voting, but
// masters no group until it restarts.
type Drained struct {
	Node   uint32 `json:"node"`
	Groups []int  `json:"groups"`
	// Served: a peer masters each of Groups. Reason says why not
	// otherwise.
	Served bool   `json:"served"`
	Reason string `json:"reason,omitempty"`
	TookMs int64  `json:"took_ms"`
}
