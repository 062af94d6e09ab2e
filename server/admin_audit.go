package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// The audit log's node side (adminhttp.AuditNode): a record is proposed
// to lock group 0 when this node masters it, else relayed to its master's
// admin endpoint (POST /audit), so that a change served by any node,
// a force-unlock on a lock group's master included, leaves one record
// that every replica of group 0 keeps in the same order. Reads come
// from this node's replica.

var _ adminhttp.AuditNode = adminNode{}

// auditRetry is the pause before a record is proposed again after group
// 0's master moved under it.
const auditRetry = 100 * time.Millisecond

// Audit implements adminhttp.AuditNode.
func (n adminNode) Audit(ctx context.Context, r adminapi.AuditRecord, relayed bool) error {
	if !relayed {
		r.Node = n.cfg.NodeID
		r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	}
	rec := groupAuditRecord(r)
	for {
		err := n.svc.ProposeAudit(ctx, n.cfg.AuditKeep, rec)
		if err == nil || relayed || !errors.Is(err, group.ErrNotSystemMaster) {
			return err
		}
		m, ok := n.awaitSystemMaster(ctx)
		if ok && m != paxos.NodeID(n.cfg.NodeID) {
			if err = n.relayAudit(ctx, uint32(m), r); err == nil {
				return nil
			}
		}
		t := time.NewTimer(auditRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("audit record: %w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// relayAudit hands r to node m, group 0's master.
func (n adminNode) relayAudit(ctx context.Context, m uint32, r adminapi.AuditRecord) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit record: %w", err)
	}
	f, err := n.Forward(ctx, m, http.MethodPost, "/audit", body)
	if err != nil {
		return fmt.Errorf("relay the audit record to node %d: %w", m, err)
	}
	if f.Status != http.StatusNoContent {
		return fmt.Errorf("relay the audit record to node %d: HTTP %d: %s", m, f.Status, f.Body)
	}
	return nil
}

// AuditLog implements adminhttp.AuditNode.
func (n adminNode) AuditLog(q adminhttp.AuditQuery) adminapi.AuditLog {
	recs := n.svc.AuditRecords(group.AuditFilter{Since: q.Since, Limit: q.Limit, Action: q.Action, Namespace: q.Namespace})
	out := adminapi.AuditLog{Node: n.cfg.NodeID, Last: q.Since, Records: make([]adminapi.AuditRecord, 0, len(recs))}
	for _, r := range recs {
		out.Records = append(out.Records, adminapi.AuditRecord{
			Seq: r.Seq, Instance: r.Instance, Time: time.UnixMilli(r.TimeMs).UTC().Format(time.RFC3339Nano), Node: r.Node,
			Actor: r.Actor, Source: r.Source, Action: r.Action, Namespace: r.Namespace, Target: r.Target, Outcome: r.Outcome,
		})
		out.Last = r.Seq
	}
	return out
}

// groupAuditRecord is r as group 0 keeps it (a Time that does not parse
// is kept as 0).
func groupAuditRecord(r adminapi.AuditRecord) group.AuditRecord {
	var ms int64
	if t, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
		ms = t.UnixMilli()
	}
	return group.AuditRecord{TimeMs: ms, Node: r.Node, Actor: r.Actor, Source: r.Source,
		Action: r.Action, Namespace: r.Namespace, Target: r.Target, Outcome: r.Outcome}
}

// auditSelfTimeout bounds the proposal of a record of this node's own.
const auditSelfTimeout = 5 * time.Second

// auditResumed records a member change (op: add or remove of node id)
// this node, as group 0's master, finished on its own.
func (s *Server) auditResumed(op string, id uint32, err error) {
	ctx, cancel := context.WithTimeout(s.life, auditSelfTimeout)
	defer cancel()
	s.auditSelf(ctx, "member_"+op, fmt.Sprintf("node %d", id), err)
}

// auditSelf records a change this node made on its own (actor "node
// N", no source): action on target, ok or err. A record that cannot be
// kept is logged, as the admin endpoint's are.
func (s *Server) auditSelf(ctx context.Context, action, target string, err error) {
	r := adminapi.AuditRecord{Actor: fmt.Sprintf("node %d", s.cfg.NodeID), Action: action, Target: target, Outcome: "ok"}
	if err != nil {
		r.Outcome = "error: " + err.Error()
	}
	if aerr := (adminNode{s}).Audit(ctx, r, false); aerr != nil {
		s.log.Error("audit record not kept", "action", r.Action, "target", r.Target, "actor", r.Actor, "outcome", r.Outcome, "err", aerr)
	}
}

// auditGauge is paxlock_audit_records: the records this node's replica
// of the audit log holds.
func auditGauge(s *Server) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paxlock_audit_records",
		Help: "Audit records this node's replica of lock group 0 holds (at most audit_keep; see GET /audit).",
	}, func() float64 { return float64(s.svc.AuditLen()) })
}
