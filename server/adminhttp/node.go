package adminhttp

import (
	"context"

	"github.com/paxlock/paxlock/adminapi"
)

// Node is what the admin endpoint asks of the node it serves: reports,
// and the procedures a request starts. Its errors carry their class
// (errors.go: ErrNotMaster, ErrConflict, ...) or wire.ErrInvalid, which
// the handlers map to HTTP statuses; their text is what the operator
// reads.
type Node interface {
	// Status is the node's report (GET /status); StatusDetail adds what
	// the console shows (GET /status?detail=1); ClusterStatus gathers
	// every node's (GET /cluster, /events).
	Status() adminapi.Status
	StatusDetail(ctx context.Context) adminapi.Status
	ClusterStatus(ctx context.Context) adminapi.ClusterStatus
	// Ready reports whether the node takes its share of the work, and if
	// not why (GET /readyz).
	Ready() (bool, string)

	// Namespaces lists the namespace table; HasNamespace looks one up.
	Namespaces() []string
	HasNamespace(ns string) bool
	// PutNamespace sets a namespace's secret, PutNamespaceVerifier its
	// verifier derived elsewhere; DeleteNamespace removes it. They are
	// proposed to lock group 0 (ErrNotSystemMaster elsewhere).
	PutNamespace(ctx context.Context, ns, secret string) error
	PutNamespaceVerifier(ctx context.Context, ns string, v adminapi.Verifier) error
	DeleteNamespace(ctx context.Context, ns string) error

	// Quotas lists the namespaces with a quota, sorted, with their use on
	// this node; Quota is one namespace's (the zero quota: none).
	// PutQuota sets one (all 0 removes it), proposed to lock group 0.
	Quotas() []adminapi.QuotaStatus
	Quota(ns string) adminapi.QuotaStatus
	PutQuota(ctx context.Context, ns string, q adminapi.NamespaceQuota) error

	// ForceUnlock revokes every hold of a key (see
	// group.Service.ForceRelease) and returns the holds removed, also
	// alongside an error when some went before it. KeyMaster names the
	// key's lock group and its master as this node knows it.
	ForceUnlock(ctx context.Context, ns, key string) ([]adminapi.ReleasedHold, error)
	KeyMaster(ns, key string) (group int, master uint32)

	// Registry is this node's replica of the registry's tables, without
	// the verifiers and Next unset; RegistryReplyBytes bounds a reply of
	// GET /registry (0: adminapi.RegistryPageBytes).
	Registry() adminapi.Registry
	RegistryReplyBytes() int
	// The registry's changes, proposed to lock group 0.
	PutRegistryCluster(ctx context.Context, c adminapi.RegistryCluster) error
	DeleteRegistryCluster(ctx context.Context, name string) error
	PutRegistryNamespace(ctx context.Context, ns, cluster, secret string) error
	DeleteRegistryNamespace(ctx context.Context, ns string) error
	PutRegistryMove(ctx context.Context, m adminapi.RegistryMove) error
	DeleteRegistryMove(ctx context.Context, ns string, token uint64) error

	// Drain hands every group this node masters to its peers (POST
	// /drain); an error is a refusal (HTTP 409), the adminapi.Drained
	// says how far it went otherwise. Undrain undoes it (DELETE /drain);
	// an error: nothing to undo (409).
	Drain(ctx context.Context) (adminapi.Drained, error)
	Undrain(ctx context.Context) (adminapi.Drained, error)

	// SystemMaster is lock group 0's master as this node knows it (0:
	// none). AdminAddr is node id's admin address, "" when id is this
	// node, unknown, or has no admin address: where a request this node
	// cannot serve is redirected.
	SystemMaster() uint32
	AdminAddr(id uint32) string

	MemberNode
	LockNode
	ClientNode
	ForwardNode
	BackupNode
	MoveNode
}
