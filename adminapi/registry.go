package adminapi

import (
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// The registry's tables, as a meta cluster's nodes show them (GET
// /registry) and take changes (PUT and DELETE /registry/clusters/{name},
// /registry/namespaces/{name}, /registry/moves/{namespace}). The tables
// live in the meta cluster's lock group 0; registry processes subscribe
// to them over the wire protocol (wire.TypeSubscribeRegistry).

// Registry is the registry's tables without the namespaces' verifiers.
type Registry struct {
	// Version rises with every change of any table.
	Version    uint64              `json:"version"`
	Clusters   []RegistryCluster   `json:"clusters"`
	Namespaces []RegistryNamespace `json:"namespaces"`
	Moves      []RegistryMove      `json:"moves"`
	// Next, in a page (GET /registry?limit=N&after=CURSOR), is the
	// cursor of the next page ("" after the last): pages list clusters,
	// then namespaces, then moves, each by name, under RegistryPageBytes
	// of JSON. Pages are read from the tables as they are: a client that
	// needs one version reads them again while Version changes between
	// its pages. GET /registry without limit or after answers the whole
	// tables, or 413 when they are over RegistryPageBytes.
	Next string `json:"next,omitempty"`
}

// RegistryPageBytes bounds a reply of GET /registry: a page's JSON, or
// the whole tables' when not paged. RegistryPageLimit is a page's default
// and RegistryPageMaxLimit its highest number of entries.
const (
	RegistryPageBytes    = 1 << 20
	RegistryPageLimit    = 1000
	RegistryPageMaxLimit = 10000
)

// RegistryCluster is one lock cluster the registry serves.
type RegistryCluster struct {
	Name string `json:"name"`
	// Client lists seed client addresses of the cluster's nodes
	// (host:port): a registry follows the cluster's view there.
	Client []string `json:"client"`
	// Admin lists the nodes' admin addresses (host:port), where a
	// registry installs the namespaces' verifiers; none: verifiers are
	// installed by hand.
	Admin []string `json:"admin,omitempty"`
	// CA is the PEM CA certificate of the cluster's admin HTTPS (none:
	// plain HTTP).
	CA string `json:"ca,omitempty"`
}

// RegistryNamespace is one namespace's assignment.
type RegistryNamespace struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	// Epoch rises with every change of the namespace's cluster (1 when
	// first assigned); registries serve views whose versions start with
	// it, so that a client's view versions keep rising across a change.
	Epoch uint64 `json:"epoch"`
}

// RegistryClusterPut is the body of PUT /registry/clusters/{name}.
type RegistryClusterPut struct {
	Client []string `json:"client"`
	Admin  []string `json:"admin,omitempty"`
	CA     string   `json:"ca,omitempty"`
}

// RegistryNamespacePut is the body of PUT /registry/namespaces/{name}:
// the cluster that serves the namespace and its secret, from which the
// node that proposes the change derives the namespace's SCRAM verifier
// (the secret itself is never stored). An empty secret keeps the
// verifier of a namespace that exists (a change of cluster only).
type RegistryNamespacePut struct {
	Cluster string `json:"cluster"`
	Secret  string `json:"secret,omitempty"`
}

// MoveState is a namespace move's state (docs/design.md, "Moving a
// namespace").
type MoveState uint8

// Move states, in the order a move passes them; MoveAborting (an abort
// asked for, before the flip) and MoveAborted end a move rolled back.
const (
	MovePrepare  MoveState = 1
	MoveFreeze   MoveState = 2
	MoveCopy     MoveState = 3
	MoveFlip     MoveState = 4
	MoveDrop     MoveState = 5
	MoveDone     MoveState = 6
	MoveAborted  MoveState = 7
	MoveAborting MoveState = 8
)

var moveStateNames = [...]string{MovePrepare: "prepare", MoveFreeze: "freeze", MoveCopy: "copy", MoveFlip: "flip", MoveDrop: "drop", MoveDone: "done", MoveAborted: "aborted", MoveAborting: "aborting"}

// Valid reports whether s is a defined state.
func (s MoveState) Valid() bool { return s >= MovePrepare && s <= MoveAborting }

// Finished reports whether a move in state s has ended (done or aborted).
func (s MoveState) Finished() bool { return s == MoveDone || s == MoveAborted }

// Flipped reports whether a move in state s has passed the point of no
// return: the namespace is assigned to the target, and the move only
// rolls forward.
func (s MoveState) Flipped() bool { return s >= MoveFlip && s <= MoveDone }

// Aborts reports whether s rolls the move back (aborting or aborted).
func (s MoveState) Aborts() bool { return s == MoveAborting || s == MoveAborted }

// String names the state.
func (s MoveState) String() string {
	if s.Valid() {
		return moveStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s MoveState) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: move state %d", wire.ErrInvalid, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *MoveState) UnmarshalText(b []byte) error {
	for st := MovePrepare; st <= MoveAborting; st++ {
		if st.String() == string(b) {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("%w: unknown move state %q", wire.ErrInvalid, b)
}

// RegistryMove is a namespace move's record: the body of PUT
// /registry/moves/{namespace} and an entry of Registry.Moves.
//
// A put is fenced: Token is the mover lock's fencing token, and a put
// whose Token is below the highest the record has seen is refused (HTTP
// 409), so that a driver that stalled past its lock's lease cannot write
// a stale step. A put that names another move ID than the record's
// unfinished move is refused too, as is a put of a move that has no
// record unless its state is prepare. The put that takes a move to flip
// (or past it) from an earlier state also assigns the namespace to To,
// with its epoch raised, in the same replicated command.
type RegistryMove struct {
	Namespace string    `json:"namespace"`
	ID        uint64    `json:"id"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	State     MoveState `json:"state"`
	Step      uint64    `json:"step"`
	Token     uint64    `json:"token"`
}

// NamespacePut is the body of POST /namespaces: a namespace's name and
// either its secret (the node derives the verifier) or its SCRAM-SHA-256
// verifier, derived elsewhere (a registry installs the meta cluster's
// verifier so; the secret never travels).
type NamespacePut struct {
	Name     string    `json:"name"`
	Secret   string    `json:"secret,omitempty"`
	Verifier *Verifier `json:"verifier,omitempty"`
}

// Verifier is a SCRAM-SHA-256 verifier (RFC 5802): the secret's salt and
// iteration count, StoredKey and ServerKey. It lets a server check a
// client's proof, not act as the client.
type Verifier struct {
	Iters     int    `json:"iters"`
	Salt      []byte `json:"salt"`
	StoredKey []byte `json:"stored_key"`
	ServerKey []byte `json:"server_key"`
}
