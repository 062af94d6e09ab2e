package server

import (
	"context"
	"io"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// adminNode is the node as the admin endpoint sees it (adminhttp.Node):
// the reports and procedures of Server and its lock service, in the
// admin API's types.
type adminNode struct{ *Server }

var _ adminhttp.Node = adminNode{}

func (n adminNode) Namespaces() []string        { return n.svc.Namespaces() }
func (n adminNode) HasNamespace(ns string) bool { return n.svc.HasNamespace(ns) }
func (n adminNode) SystemMaster() uint32        { return uint32(n.svc.SystemMaster()) }
func (n adminNode) AdminAddr(id uint32) string  { return n.adminAddr(id) }

func (n adminNode) PutNamespace(ctx context.Context, ns, secret string) error {
	return n.svc.PutNamespace(ctx, ns, secret)
}

func (n adminNode) PutNamespaceVerifier(ctx context.Context, ns string, v adminapi.Verifier) error {
	return n.svc.PutNamespaceVerifier(ctx, ns, scramauth.Verifier{Iters: v.Iters, Salt: v.Salt, StoredKey: v.StoredKey, ServerKey: v.ServerKey})
}

func (n adminNode) DeleteNamespace(ctx context.Context, ns string) error {
	return n.svc.DeleteNamespace(ctx, ns)
}

func (n adminNode) Quotas() []adminapi.QuotaStatus { return n.quotas() }

func (n adminNode) Quota(ns string) adminapi.QuotaStatus {
	return quotaStatus(ns, n.svc.QuotaUsage()[ns])
}

func (n adminNode) PutQuota(ctx context.Context, ns string, q adminapi.NamespaceQuota) error {
	return n.svc.PutQuota(ctx, ns, group.Quota{Held: q.Held, Waiters: q.Waiters, Rate: q.Rate, Burst: q.Burst})
}

func (n adminNode) ForceUnlock(ctx context.Context, ns, key string) ([]adminapi.ReleasedHold, error) {
	rel, err := n.svc.ForceRelease(ctx, ns, key)
	out := make([]adminapi.ReleasedHold, 0, len(rel))
	for _, h := range rel {
		out = append(out, adminapi.ReleasedHold{Client: h.Owner.Client, Owner: h.Owner.ID, Token: h.Token})
	}
	return out, err
}

func (n adminNode) KeyMaster(ns, key string) (int, uint32) {
	g := group.Of(wire.KeyHash(ns, key), len(n.svc.Groups()))
	var m uint32
	if v := n.view.Load(); int(g) < len(v.Groups) {
		m = v.Groups[g].Master
	}
	return int(g), m
}

func (n adminNode) Registry() adminapi.Registry {
	t := n.svc.RegistryTables()
	out := adminapi.Registry{Version: t.Version, Clusters: t.Clusters, Moves: t.Moves,
		Namespaces: make([]adminapi.RegistryNamespace, 0, len(t.Namespaces))}
	for _, ns := range t.Namespaces {
		out.Namespaces = append(out.Namespaces, ns.RegistryNamespace)
	}
	return out
}

func (n adminNode) RegistryReplyBytes() int {
	n.reg.mu.Lock()
	defer n.reg.mu.Unlock()
	return n.reg.replyBytes
}

func (n adminNode) PutRegistryCluster(ctx context.Context, c adminapi.RegistryCluster) error {
	return n.svc.PutRegistryCluster(ctx, c)
}

func (n adminNode) DeleteRegistryCluster(ctx context.Context, name string) error {
	return n.svc.DeleteRegistryCluster(ctx, name)
}

func (n adminNode) PutRegistryNamespace(ctx context.Context, ns, cluster, secret string) error {
	return n.svc.PutRegistryNamespace(ctx, ns, cluster, secret)
}

func (n adminNode) DeleteRegistryNamespace(ctx context.Context, ns string) error {
	return n.svc.DeleteRegistryNamespace(ctx, ns)
}

func (n adminNode) PutRegistryMove(ctx context.Context, m adminapi.RegistryMove) error {
	return n.svc.PutRegistryMove(ctx, m)
}

func (n adminNode) DeleteRegistryMove(ctx context.Context, ns string, token uint64) error {
	return n.svc.DeleteRegistryMove(ctx, ns, token)
}

// Drain refuses a drain that drainLeavesQuorum refuses, else hands every
// group over (handOverAll).
func (n adminNode) Drain(ctx context.Context) (adminapi.Drained, error) {
	if err := n.drainLeavesQuorum(); err != nil {
		return adminapi.Drained{}, err
	}
	return n.handOverAll(ctx), nil
}

func (n adminNode) Undrain(ctx context.Context) (adminapi.Drained, error) { return n.undrain(ctx) }

func (n adminNode) NodeID() uint32 { return n.cfg.NodeID }
func (n adminNode) Groups() int    { return len(n.svc.Groups()) }

func (n adminNode) ServesSystem() bool { return n.svc.Group(group.NamespaceGroup).Serving() }

func (n adminNode) AwaitSystemMaster(ctx context.Context) (uint32, bool) {
	m, ok := n.awaitSystemMaster(ctx)
	return uint32(m), ok
}

// AwaitHandOver waits, within ctx and MemberChangeTimeout, until group
// 0 has a master other than this node.
func (n adminNode) AwaitHandOver(ctx context.Context) (uint32, bool) {
	var m paxos.NodeID
	ok := waitUntil(ctx, MemberChangeTimeout, func() bool {
		m = n.svc.SystemMaster()
		return m != 0 && m != paxos.NodeID(n.cfg.NodeID)
	})
	return uint32(m), ok
}

// BeginMemberChange takes the node's one member-change slot (memChange).
func (n adminNode) BeginMemberChange(ctx context.Context) (func(), bool) {
	select {
	case n.memChange <- struct{}{}:
		return func() { <-n.memChange }, true
	case <-ctx.Done():
		return nil, false
	}
}

func (n adminNode) ChangeGroup(ctx context.Context, g int, ch paxos.MemberChange) error {
	return n.changeLocalGroup(ctx, group.ID(g), ch)
}

func (n adminNode) ClusterName() string { return n.cfg.ClusterName }

func (n adminNode) OpenImage(ctx context.Context, g int) (paxos.SnapshotSource, error) {
	return n.openImage(ctx, group.ID(g))
}

func (n adminNode) WriteBackup(ctx context.Context, w io.Writer, at time.Time) (int, int64, error) {
	return n.writeBackup(ctx, w, at)
}

func (n adminNode) MoveStep(ns, step string, body []byte) (adminhttp.MoveStep, error) {
	a, err := n.moveAction(ns, step, body)
	if err != nil {
		return nil, err
	}
	return moveStepOf{a}, nil
}

func (n adminNode) MoveFrozen(ns, id string, g int) (uint32, string, bool) {
	return n.moveFrozen(ns, id, group.ID(g))
}

func (n adminNode) ExportMove(ns, id string, g int, emit func(pairs []byte) error) (adminapi.MoveExportLine, error) {
	return n.exportMove(ns, id, group.ID(g), emit)
}
