package adminapi

// Moving a namespace between clusters: the lock clusters' admin API
// (docs/design.md, "Moving a namespace"). Every endpoint works on any
// node of a cluster: a step is taken in every lock group, each on its
// master (the node forwards to the others), and every step repeated with
// the same move id succeeds and changes nothing.
//
//	GET  /moves/{ns}                 MoveStatus
//	POST /moves/{ns}/incoming        MoveStep{ID, Verifier}: the target answers MOVING, then installs the verifier
//	POST /moves/{ns}/freeze          MoveStep{ID}: the source changes nothing of ns from here
//	GET  /moves/{ns}/export?group=G&id=ID   MoveExportLine stream (newline-delimited JSON)
//	POST /moves/{ns}/import          MoveImport: one exported batch, each key to its group here
//	POST /moves/{ns}/version         MoveStep{Min}: every group's version raised to at least Min
//	POST /moves/{ns}/own             MoveStep{ID}: the target serves ns (the flip)
//	POST /moves/{ns}/drop            MoveStep{ID, MovedTo}: the source deletes ns's records, answers MOVED
//	POST /moves/{ns}/unfreeze        MoveStep{ID}: the abort, on either cluster, up to the flip
//
// A step's answer is a MoveResult: 200 when every group took it, 409
// when a group's move state does not allow it (another move, or out of
// order: nothing changed there), 503 when a group could not be reached
// in time (repeat the step). ?group=G takes the step in group G only, on
// its master (409 from another node).

// MoveStatus is the answer of GET /moves/{ns}: the namespace's move state
// in every lock group, as the answering node's replicas have applied it.
type MoveStatus struct {
	Namespace string      `json:"namespace"`
	Node      uint32      `json:"node"`
	Groups    []MoveGroup `json:"groups"`
	// Clients are the cluster's client addresses (a drop's MovedTo on
	// the source names the target's).
	Clients []string `json:"clients"`
	// Verifier is the namespace's record in the cluster's namespace
	// table (a SCRAM verifier), to install on the target; absent when
	// the cluster does not know the namespace.
	Verifier []byte `json:"verifier,omitempty"`
}

// MoveGroup is one lock group's part of a MoveStatus.
type MoveGroup struct {
	Group int `json:"group"`
	// State is none, incoming, frozen, owned or dropped.
	State   string `json:"state"`
	ID      string `json:"id,omitempty"`
	MovedTo string `json:"moved_to,omitempty"`
	// Version is the group version: a token is version<<48 | instance.
	Version uint64 `json:"version"`
	Applied uint64 `json:"applied"`
	// Batches is how many import batches the group applied (incoming).
	Batches int `json:"batches,omitempty"`
	// Locks is how many keys of the namespace the group holds.
	Locks  int64  `json:"locks"`
	Master uint32 `json:"master"`
}

// MoveStep is the body of a move step.
type MoveStep struct {
	// ID names the move; every step of one move carries the same.
	ID string `json:"id"`
	// MovedTo (drop) is the target's client addresses, comma-separated:
	// what the source answers MOVED with.
	MovedTo string `json:"moved_to,omitempty"`
	// Verifier (incoming) is the namespace's record as MoveStatus gives
	// it; SCRAM gives the verifier as the registry's tables hold it;
	// Secret derives a new one instead.
	Verifier []byte    `json:"verifier,omitempty"`
	SCRAM    *Verifier `json:"scram,omitempty"`
	Secret   string    `json:"secret,omitempty"`
	// Min (version) is the group version every group must reach.
	Min uint64 `json:"min,omitempty"`
	// Delete (namespace, an internal step) removes the namespace's record.
	Delete bool `json:"delete,omitempty"`
	// Fence is the mover lock's token: every group refuses a step whose
	// fence is below the highest it applied for the namespace (409), so a
	// driver that stalled past its lock cannot undo its successor's work.
	// 0 fences nothing (and is refused once a fence is set).
	Fence uint64 `json:"fence,omitempty"`
}

// MoveImport is the body of POST /moves/{ns}/import: one batch of a source
// group's export, applied once per (ID, SrcGroup, Batch).
type MoveImport struct {
	ID       string `json:"id"`
	SrcGroup int    `json:"src_group"`
	Batch    int    `json:"batch"`
	// Pairs are the batch's records in the backup pair encoding.
	Pairs []byte `json:"pairs"`
	// Fence is fenced as MoveStep's.
	Fence uint64 `json:"fence,omitempty"`
}

// MoveExportLine is one line of GET /moves/{ns}/export: batches of pairs
// (Batch from 0), then a last line with End set, the group version and
// the counts. An export without its End line is incomplete.
type MoveExportLine struct {
	Group   int    `json:"group"`
	Batch   int    `json:"batch"`
	Pairs   []byte `json:"pairs,omitempty"`
	End     bool   `json:"end,omitempty"`
	Version uint64 `json:"version,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	Batches int    `json:"batches,omitempty"`
	Locks   int    `json:"locks,omitempty"`
	// Error, on the last line instead of End, says why the export
	// stopped.
	Error string `json:"error,omitempty"`
}

// MoveResult is the answer of a move step: the groups that took it and
// those that did not, with the first error.
type MoveResult struct {
	Done    []int  `json:"done"`
	Pending []int  `json:"pending"`
	Error   string `json:"error,omitempty"`
}
