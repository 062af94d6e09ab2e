package server

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// adminErrClasses are the lock service's sentinels by the admin
// endpoint's error class (adminhttp.ErrNotMaster, ...), which decides the
// HTTP status it answers.
var adminErrClasses = []struct{ class, err error }{
	{adminhttp.ErrNotMaster, group.ErrNotMaster},
	{adminhttp.ErrNotSystemMaster, group.ErrNotSystemMaster},
	{adminhttp.ErrNotFound, group.ErrUnknownNamespace},
	{adminhttp.ErrNotFound, group.ErrRegistryUnknown},
	{adminhttp.ErrConflict, group.ErrMemberRemoved},
	{adminhttp.ErrConflict, group.ErrIncarnation},
	{adminhttp.ErrConflict, group.ErrMoveConflict},
	{adminhttp.ErrConflict, group.ErrRegistryInUse},
	{adminhttp.ErrConflict, group.ErrRegistryMoveConflict},
	{adminhttp.ErrConflict, group.ErrStaleMoveToken},
	{adminhttp.ErrConflict, group.ErrRegistryFull},
	{adminhttp.ErrConflict, group.ErrNamespaceMoved},
	{adminhttp.ErrBadInput, group.ErrMoveBadBatch},
	{adminhttp.ErrBadInput, group.ErrVersionRange},
	{adminhttp.ErrBadInput, paxos.ErrBadChange},
	{adminhttp.ErrRetryLater, group.ErrNamespaceMoving},
}

// classedErr is an error with its admin class: its text is the error's,
// and errors.Is finds both.
type classedErr struct{ err, class error }

func (e classedErr) Error() string   { return e.err.Error() }
func (e classedErr) Unwrap() []error { return []error{e.err, e.class} }

// adminErr wraps err in its admin class, if it has one.
func adminErr(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range adminErrClasses {
		if errors.Is(err, c.err) {
			return classedErr{err: err, class: c.class}
		}
	}
	return err
}

// adminErrNode is adminNode with every error in its admin class: the
// Node the admin endpoint serves.
type adminErrNode struct{ adminNode }

var _ adminhttp.Node = adminErrNode{}

func (n adminErrNode) PutNamespace(ctx context.Context, ns, secret string) error {
	return adminErr(n.adminNode.PutNamespace(ctx, ns, secret))
}

func (n adminErrNode) PutNamespaceVerifier(ctx context.Context, ns string, v adminapi.Verifier) error {
	return adminErr(n.adminNode.PutNamespaceVerifier(ctx, ns, v))
}

func (n adminErrNode) DeleteNamespace(ctx context.Context, ns string) error {
	return adminErr(n.adminNode.DeleteNamespace(ctx, ns))
}

func (n adminErrNode) PutQuota(ctx context.Context, ns string, q adminapi.NamespaceQuota) error {
	return adminErr(n.adminNode.PutQuota(ctx, ns, q))
}

func (n adminErrNode) ForceUnlock(ctx context.Context, ns, key string) ([]adminapi.ReleasedHold, error) {
	rel, err := n.adminNode.ForceUnlock(ctx, ns, key)
	return rel, adminErr(err)
}

func (n adminErrNode) PutRegistryCluster(ctx context.Context, c adminapi.RegistryCluster) error {
	return adminErr(n.adminNode.PutRegistryCluster(ctx, c))
}

func (n adminErrNode) DeleteRegistryCluster(ctx context.Context, name string) error {
	return adminErr(n.adminNode.DeleteRegistryCluster(ctx, name))
}

func (n adminErrNode) PutRegistryNamespace(ctx context.Context, ns, cluster, secret string) error {
	return adminErr(n.adminNode.PutRegistryNamespace(ctx, ns, cluster, secret))
}

func (n adminErrNode) DeleteRegistryNamespace(ctx context.Context, ns string) error {
	return adminErr(n.adminNode.DeleteRegistryNamespace(ctx, ns))
}

func (n adminErrNode) PutRegistryMove(ctx context.Context, m adminapi.RegistryMove) error {
	return adminErr(n.adminNode.PutRegistryMove(ctx, m))
}

func (n adminErrNode) DeleteRegistryMove(ctx context.Context, ns string, token uint64) error {
	return adminErr(n.adminNode.DeleteRegistryMove(ctx, ns, token))
}

func (n adminErrNode) Drain(ctx context.Context) (adminapi.Drained, error) {
	d, err := n.adminNode.Drain(ctx)
	return d, adminErr(err)
}

func (n adminErrNode) Undrain(ctx context.Context) (adminapi.Drained, error) {
	d, err := n.adminNode.Undrain(ctx)
	return d, adminErr(err)
}

func (n adminErrNode) AddMember(ctx context.Context, m adminapi.Member, auth string) (*adminapi.MemberChangeError, error) {
	rep, err := n.adminNode.AddMember(ctx, m, auth)
	return rep, adminErr(err)
}

func (n adminErrNode) RemoveMember(ctx context.Context, id uint32, auth string) (*adminapi.MemberChangeError, error) {
	rep, err := n.adminNode.RemoveMember(ctx, id, auth)
	return rep, adminErr(err)
}

func (n adminErrNode) ChangeGroup(ctx context.Context, g int, ch paxos.MemberChange) error {
	return adminErr(n.adminNode.ChangeGroup(ctx, g, ch))
}

func (n adminErrNode) ListLocks(ctx context.Context, q adminhttp.LockQuery) (adminapi.LockPage, error) {
	p, err := n.adminNode.ListLocks(ctx, q)
	return p, adminErr(err)
}

func (n adminErrNode) InspectKey(ctx context.Context, ns, key string) (adminapi.LockDetail, error) {
	d, err := n.adminNode.InspectKey(ctx, ns, key)
	return d, adminErr(err)
}

func (n adminErrNode) OpenImage(ctx context.Context, g int) (paxos.SnapshotSource, error) {
	src, err := n.adminNode.OpenImage(ctx, g)
	return src, adminErr(err)
}

func (n adminErrNode) WriteBackup(ctx context.Context, w io.Writer, at time.Time) (int, int64, error) {
	groups, locks, err := n.adminNode.WriteBackup(ctx, w, at)
	return groups, locks, adminErr(err)
}

func (n adminErrNode) MoveStep(ns, step string, body []byte) (adminhttp.MoveStep, error) {
	st, err := n.adminNode.MoveStep(ns, step, body)
	if err != nil {
		return nil, adminErr(err)
	}
	return adminErrMoveStep{st}, nil
}

func (n adminErrNode) ExportMove(ns, id string, g int, emit func(pairs []byte) error) (adminapi.MoveExportLine, error) {
	l, err := n.adminNode.ExportMove(ns, id, g, emit)
	return l, adminErr(err)
}

// adminErrMoveStep is a move step whose errors are in their admin class.
type adminErrMoveStep struct{ adminhttp.MoveStep }

func (m adminErrMoveStep) InGroup(ctx context.Context, g int) error {
	return adminErr(m.MoveStep.InGroup(ctx, g))
}

func (m adminErrMoveStep) Everywhere(ctx context.Context) ([]int, []error) {
	gs, errs := m.MoveStep.Everywhere(ctx)
	for i := range errs {
		errs[i] = adminErr(errs[i])
	}
	return gs, errs
}
